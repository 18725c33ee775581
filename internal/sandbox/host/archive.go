package host

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/sandbox/agent"
)

// archiveHang is how long one chunk of a transfer may go unanswered before the agent is taken for hung.
const archiveHang = 2 * time.Minute

// PutDir copies the tree of dir, on this host, into the sandbox at in.Dir (agent.ArchivePutTool): in's Keep and
// ReadOnly apply; its Transfer is filled in.
func (c *Client) PutDir(ctx context.Context, dir string, in agent.ArchiveInput) error {
	c.xferMu.Lock() // the agent runs one transfer at a time
	defer c.xferMu.Unlock()
	in.Transfer = "put-" + randomName()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(agent.WriteTar(ctx, dir, pw)) }()
	defer pr.Close()
	buf := make([]byte, agent.ArchiveChunk)
	for {
		n, err := io.ReadFull(pr, buf)
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			in.Last = true
		case err != nil:
			c.abort(agent.ArchivePutTool, in)
			return fmt.Errorf("%s: %w", dir, err)
		}
		if err := c.chunk(ctx, agent.ArchivePutTool, in, buf[:n], nil); err != nil {
			return err
		}
		if in.Last {
			return nil
		}
		in.Seq++
	}
}

// GetDir makes dir, on this host, a copy of the sandbox's in.Dir (agent.ArchiveGetTool), within opt's bounds:
// the copy is extracted beside dir and exchanged with it (atomically) only when whole, so that dir is either as it
// was or as the sandbox's is (what the sandbox deleted is gone from it too), even across a crash. Its Transfer is
// filled in.
func (c *Client) GetDir(ctx context.Context, in agent.ArchiveInput, dir string, opt agent.ExtractOptions) error {
	c.xferMu.Lock()
	defer c.xferMu.Unlock()
	in.Transfer = "get-" + randomName()
	tmp := dir + ".sync-" + in.Transfer
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := agent.ExtractTar(ctx, tmp, pr, opt)
		if err == nil {
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(cmp.Or(err, errors.New("extraction ended")))
		extracted <- err
	}()
	var err error
	for eof := false; err == nil && !eof; in.Seq++ {
		err = c.chunk(ctx, agent.ArchiveGetTool, in, nil, func(resp agent.Response) error {
			eof = resp.EOF
			_, err := pw.Write(resp.Data)
			return err
		})
	}
	if err != nil {
		c.abort(agent.ArchiveGetTool, in)
		pw.CloseWithError(err)
		if xerr := <-extracted; xerr != nil && !errors.Is(xerr, err) {
			err = xerr // the extraction's own failure (over a bound) is why the write failed
		}
		return fmt.Errorf("copy of %s: %w", in.Dir, err)
	}
	pw.Close()
	if err := <-extracted; err != nil {
		return fmt.Errorf("copy of %s: %w", in.Dir, err)
	}
	// The copy takes dir's place and dir's content goes to tmp (removed), in one step: no moment without dir.
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = os.Rename(tmp, dir) // no dir yet
	}
	return err
}

// chunk sends one request of a transfer, with data, and hands its answer to got.
func (c *Client) chunk(ctx context.Context, tool string, in agent.ArchiveInput, data []byte, got func(agent.Response) error) error {
	input, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, agent.Request{Tool: tool, Input: input, Data: data}, archiveHang)
	if err != nil {
		return err
	}
	if resp.IsError {
		text := ""
		for _, b := range resp.Content {
			text += b.Text
		}
		return fmt.Errorf("agent: %s", text)
	}
	if got != nil {
		return got(resp)
	}
	return nil
}

// abort ends a transfer the host gives up on (best effort: the next transfer would end it too).
func (c *Client) abort(tool string, in agent.ArchiveInput) {
	in.Abort = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.chunk(ctx, tool, in, nil, nil)
}

func randomName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
