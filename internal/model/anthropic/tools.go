package anthropic

import (
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model"
)

// maxToolCacheBytes bounds what a toolCache holds: the encoded definitions and their keys.
const maxToolCacheBytes = 4 << 20

// toolCache keeps each client tool's definition as the SDK encodes it, with and without the tools' cache mark.
// Encoding a definition through the SDK (its input schema parsed, then encoded again by reflection) was most of
// what building a first turn's request cost, on every model call, for definitions that change only when the agent
// does (BenchmarkParams, the built-in toolset: 70 µs a request before the cache, 30 with it). A cached definition is sent as the same bytes the SDK
// would send. When what it holds would pass maxToolCacheBytes the cache starts again from empty: an agent's
// tools are few, and a server with more distinct tools than that only pays the SDK's encoding again.
type toolCache struct {
	mu    sync.Mutex
	m     map[string]encodedTool
	bytes int
}

// encodedTool is one tool's definition as the request's JSON, without and with the cache mark.
type encodedTool struct {
	plain, marked json.RawMessage
}

// get returns t's encoded definition, encoding it on a miss; key is appendToolKey's for t. An invalid input
// schema is an error, not cached.
func (c *toolCache) get(key []byte, t model.ToolSpec) (encodedTool, error) {
	c.mu.Lock()
	enc, ok := c.m[string(key)]
	c.mu.Unlock()
	if ok {
		return enc, nil
	}
	enc, err := encodeTool(t)
	if err != nil {
		return encodedTool{}, err
	}
	size := len(key) + len(enc.plain) + len(enc.marked)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+size > maxToolCacheBytes {
		c.m, c.bytes = map[string]encodedTool{}, 0
	}
	if _, ok := c.m[string(key)]; !ok && size <= maxToolCacheBytes {
		c.m[string(key)] = enc
		c.bytes += size
	}
	return enc, nil
}

// appendToolKey appends t's key to key: what a definition is encoded from, each part after its length, so that
// no two specs share a key.
func appendToolKey(key []byte, t model.ToolSpec) []byte {
	key = binary.AppendUvarint(key, uint64(len(t.Name)))
	key = append(key, t.Name...)
	key = binary.AppendUvarint(key, uint64(len(t.Description)))
	key = append(key, t.Description...)
	key = binary.AppendUvarint(key, uint64(len(t.InputSchema)))
	return append(key, t.InputSchema...)
}

// encodeTool encodes t through the SDK, as it would be encoded in a request, without and with the cache mark.
func encodeTool(t model.ToolSpec) (encodedTool, error) {
	tool, err := toolParam(t)
	if err != nil {
		return encodedTool{}, err
	}
	plain, err := json.Marshal(anthropic.ToolUnionParam{OfTool: tool})
	if err != nil {
		return encodedTool{}, err
	}
	tool.CacheControl = anthropic.NewCacheControlEphemeralParam()
	marked, err := json.Marshal(anthropic.ToolUnionParam{OfTool: tool})
	if err != nil {
		return encodedTool{}, err
	}
	return encodedTool{plain: plain, marked: marked}, nil
}
