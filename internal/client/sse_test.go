package client_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/corralhq/corral/internal/client"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	type frame struct{ id, event, data string }
	cases := []struct {
		name string
		in   string
		want []frame
		last string
	}{
		{"one", "id: sevt_1\nevent: agent.message\ndata: {}\n\n", []frame{{"sevt_1", "agent.message", "{}"}}, "sevt_1"},
		{"comments and heartbeats", ": ping\n\n: ping\nevent: a\ndata: x\n\n:\n\n", []frame{{"", "a", "x"}}, ""},
		{"multi-line data", "data: a\ndata:b\ndata:  c\ndata\n\n", []frame{{"", "", "a\nb\n c\n"}}, ""},
		{"CRLF and CR", "id: 1\r\ndata: a\r\n\r\nid: 2\rdata: b\r\r", []frame{{"1", "", "a"}, {"2", "", "b"}}, "2"},
		{"no data is no frame", "event: x\n\nid: 7\n\ndata: y\n\n", []frame{{"", "", "y"}}, "7"},
		{"fields reset per frame", "event: a\nid: 1\ndata: x\n\ndata: y\n\n", []frame{{"1", "a", "x"}, {"", "", "y"}}, "1"},
		{"unknown fields and retry ignored", "retry: 10\nfoo: bar\ndata: z\n\n", []frame{{"", "", "z"}}, ""},
		{"value without space", "event:e\ndata:d\n\n", []frame{{"", "e", "d"}}, ""},
		{"cut off at the end", "data: a\n\ndata: b\n", []frame{{"", "", "a"}}, ""},
		{"empty data line", "data:\n\n", []frame{{"", "", ""}}, ""},
	}
	for _, tc := range cases {
		for _, oneByte := range []bool{false, true} {
			var in io.Reader = strings.NewReader(tc.in)
			if oneByte {
				in = iotest.OneByteReader(in)
			}
			r := client.NewSSEReader(in, 0)
			var got []frame
			for {
				f, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				got = append(got, frame{f.ID, f.Event, string(f.Data)})
			}
			if len(got) != len(tc.want) {
				t.Errorf("%s (one byte %v): frames %q, want %q", tc.name, oneByte, got, tc.want)
				continue
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("%s (one byte %v): frame %d = %q, want %q", tc.name, oneByte, i, got[i], tc.want[i])
				}
			}
			if r.LastEventID() != tc.last {
				t.Errorf("%s: LastEventID %q, want %q", tc.name, r.LastEventID(), tc.last)
			}
		}
	}
}

// A line or a frame beyond the bound is an error, not an unbounded buffer.
func TestSSEReaderBounds(t *testing.T) {
	t.Parallel()
	long := "data: " + strings.Repeat("x", 100) + "\n\n"
	if _, err := client.NewSSEReader(strings.NewReader(long), 64).Next(); !errors.Is(err, client.ErrFrameTooLarge) {
		t.Errorf("long line: %v, want ErrFrameTooLarge", err)
	}
	lines := strings.Repeat("data: "+strings.Repeat("y", 30)+"\n", 4) + "\n"
	if _, err := client.NewSSEReader(strings.NewReader(lines), 64).Next(); !errors.Is(err, client.ErrFrameTooLarge) {
		t.Errorf("long frame: %v, want ErrFrameTooLarge", err)
	}
	if f, err := client.NewSSEReader(strings.NewReader("data: "+strings.Repeat("z", 50)+"\n\n"), 64).Next(); err != nil || len(f.Data) != 50 {
		t.Errorf("frame within the bound: %v", err)
	}
	noEnd := strings.Repeat("w", 200) // no line end at all
	if _, err := client.NewSSEReader(strings.NewReader(noEnd), 64).Next(); !errors.Is(err, client.ErrFrameTooLarge) {
		t.Errorf("unterminated line: %v, want ErrFrameTooLarge", err)
	}
}

// FuzzSSEReader: any input yields frames or an error, never a panic, and never data beyond the bound.
func FuzzSSEReader(f *testing.F) {
	f.Add("id: 1\nevent: e\ndata: a\ndata: b\n\n: ping\n\n")
	f.Add("data: x\r\n\r\ndata: y\r\r")
	f.Fuzz(func(t *testing.T, in string) {
		r := client.NewSSEReader(strings.NewReader(in), 256)
		for range len(in) + 1 {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if len(fr.Data) > 256 {
				t.Fatalf("frame data of %d bytes beyond the bound", len(fr.Data))
			}
		}
		t.Fatal("more frames than input bytes")
	})
}
