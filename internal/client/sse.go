package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxFrame bounds an SSE line and a frame's data unless NewSSEReader is told otherwise: 32 MiB, room for
// the largest event the API accepts (8 MiB bodies) with JSON escaping.
const DefaultMaxFrame = 32 << 20

// ErrFrameTooLarge is returned by SSEReader.Next for a line or a frame's data beyond the reader's bound.
var ErrFrameTooLarge = errors.New("sse: frame too large")

// Frame is one Server-Sent Events frame: the fields of the lines up to a blank line.
type Frame struct {
	// ID is the frame's own id field, "" if it has none (Corral's previews carry none).
	ID string
	// Event is the event field ("" if absent: "message" in the browser's terms).
	Event string
	// Data is the data lines, joined by "\n".
	Data []byte
}

// SSEReader reads Server-Sent Events frames (the WHATWG event-stream format): lines end in "\n", "\r\n" or
// "\r"; a line that starts with ":" is a comment (a heartbeat) and is skipped; "field: value" lines set id,
// event and data (one leading space of the value is dropped; data lines accumulate); a blank line ends a frame,
// which is returned if it had data. The retry field and unknown fields are ignored. It is not safe for
// concurrent use.
type SSEReader struct {
	br     *bufio.Reader
	max    int
	line   []byte
	skipLF bool   // the last line ended in "\r": a "\n" that follows belongs to it
	last   string // the last id seen on the stream
}

// NewSSEReader returns a reader of the frames on r. maxFrame bounds a line and a frame's data (<= 0 means
// DefaultMaxFrame).
func NewSSEReader(r io.Reader, maxFrame int) *SSEReader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &SSEReader{br: bufio.NewReaderSize(r, 64<<10), max: maxFrame}
}

// LastEventID is the last id field read on the stream, the value to resume with (Last-Event-ID).
func (r *SSEReader) LastEventID() string { return r.last }

// Next returns the next frame with data. At the end of the stream it returns io.EOF (a frame cut off by the end
// is dropped, as the format requires); io.ErrUnexpectedEOF never surfaces.
func (r *SSEReader) Next() (*Frame, error) {
	var (
		f       Frame
		data    []byte
		hasData bool
	)
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				f.Data = data
				return &f, nil
			}
			f = Frame{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value, _ = bytes.CutPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			f.Event = string(value)
		case "id":
			f.ID = string(value)
			r.last = f.ID
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > r.max {
				return nil, fmt.Errorf("%w: data beyond %d bytes", ErrFrameTooLarge, r.max)
			}
			data = append(data, value...)
			hasData = true
		}
	}
}

// readLine returns the next line without its end. The slice is valid until the next call.
func (r *SSEReader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	if r.skipLF {
		r.skipLF = false
		if b, err := r.br.Peek(1); err == nil && b[0] == '\n' {
			_, _ = r.br.Discard(1)
		}
	}
	for {
		n := max(r.br.Buffered(), 1)
		buf, err := r.br.Peek(n)
		if len(buf) == 0 {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		if i := bytes.IndexAny(buf, "\r\n"); i >= 0 {
			if len(r.line)+i > r.max {
				return nil, fmt.Errorf("%w: line beyond %d bytes", ErrFrameTooLarge, r.max)
			}
			r.line = append(r.line, buf[:i]...)
			r.skipLF = buf[i] == '\r'
			_, _ = r.br.Discard(i + 1)
			return r.line, nil
		}
		if len(r.line)+len(buf) > r.max {
			return nil, fmt.Errorf("%w: line beyond %d bytes", ErrFrameTooLarge, r.max)
		}
		r.line = append(r.line, buf...)
		_, _ = r.br.Discard(len(buf))
	}
}
