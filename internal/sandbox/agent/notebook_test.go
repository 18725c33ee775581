package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testNotebook = `{"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}}, "cells": [
 {"cell_type": "markdown", "source": ["# Title\n", "Some text."], "metadata": {}},
 {"cell_type": "code", "execution_count": 1, "source": "print('hi')\n1 + 1", "metadata": {},
  "outputs": [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]},
              {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": ["2"]}, "metadata": {}},
              {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==\n", "text/plain": ["<Figure>"]}, "metadata": {}}]},
 {"cell_type": "code", "execution_count": 2, "source": "1/0", "metadata": {},
  "outputs": [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": []}]}
]}`

// TestReadNotebook: read renders a notebook's cells with their outputs, and its images as image blocks.
func TestReadNotebook(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, true)
	if err := os.WriteFile(filepath.Join(ws, "a.ipynb"), []byte(testNotebook), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := s.Handle(context.Background(), Request{Tool: "read", Input: json.RawMessage(`{"file_path":"a.ipynb"}`), OutputCap: 1 << 16})
	if resp.IsError || len(resp.Content) != 2 || resp.Content[1].Type != "image" {
		t.Fatalf("read notebook: %+v", resp)
	}
	text := resp.Content[0].Text
	for _, want := range []string{
		"<cell 1 type=\"markdown\">\n# Title\nSome text.\n</cell>",
		"<cell 2 type=\"code (python)\">\nprint('hi')\n1 + 1\n<output stdout>\nhi\n</output>\n<output result>\n2\n</output>\n" +
			"<output image 1 (image/png)>\n<output result>\n<Figure>\n</output>\n</cell>",
		"<output error>\nZeroDivisionError: division by zero\n</output>",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("notebook text lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(string(resp.Content[1].Source), `"media_type":"image/png"`) {
		t.Errorf("image block %s", resp.Content[1].Source)
	}
	if err := os.WriteFile(filepath.Join(ws, "bad.ipynb"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, isErr := handle(t, s, "read", `{"file_path":"bad.ipynb"}`); !isErr || !strings.Contains(out, "not a Jupyter notebook") {
		t.Errorf("a broken notebook: %q %v", out, isErr)
	}
}

// TestReadPDF: read returns a PDF as a document block (the model reads its text and pages); a file named .pdf
// that is not one is refused.
func TestReadPDF(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, true)
	pdf := "%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n%%EOF\n"
	if err := os.WriteFile(filepath.Join(ws, "doc.pdf"), []byte(pdf), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := s.Handle(context.Background(), Request{Tool: "read", Input: json.RawMessage(`{"file_path":"doc.pdf"}`), OutputCap: 4096})
	if resp.IsError || len(resp.Content) != 2 || resp.Content[1].Type != "document" {
		t.Fatalf("read pdf: %+v", resp)
	}
	var src struct{ Type, MediaType, Data string }
	if err := json.Unmarshal(resp.Content[1].Source, &struct {
		Type      *string `json:"type"`
		MediaType *string `json:"media_type"`
		Data      *string `json:"data"`
	}{&src.Type, &src.MediaType, &src.Data}); err != nil {
		t.Fatal(err)
	}
	if src.Type != "base64" || src.MediaType != "application/pdf" || src.Data != base64.StdEncoding.EncodeToString([]byte(pdf)) {
		t.Errorf("document source %+v", src)
	}
	if err := os.WriteFile(filepath.Join(ws, "fake.pdf"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, isErr := handle(t, s, "read", `{"file_path":"fake.pdf"}`); !isErr || !strings.Contains(out, "not a PDF") {
		t.Errorf("a fake PDF: %q %v", out, isErr)
	}
}
