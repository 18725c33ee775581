package agent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// Notebook limits: the notebook file is read whole up to maxNotebookBytes (its images are base64 inside it);
// at most maxNotebookImages image outputs come back as image blocks.
const (
	maxNotebookBytes  = 20 * 1024 * 1024
	maxNotebookImages = 8
)

// notebook is the part of a Jupyter notebook (nbformat 4) that read shows.
type notebook struct {
	Cells []struct {
		CellType       string          `json:"cell_type"`
		Source         json.RawMessage `json:"source"`
		ExecutionCount *int            `json:"execution_count"`
		Outputs        []struct {
			OutputType string                     `json:"output_type"`
			Name       string                     `json:"name"`
			Text       json.RawMessage            `json:"text"`
			Data       map[string]json.RawMessage `json:"data"`
			EName      string                     `json:"ename"`
			EValue     string                     `json:"evalue"`
		} `json:"outputs"`
	} `json:"cells"`
	Metadata struct {
		LanguageInfo struct {
			Name string `json:"name"`
		} `json:"language_info"`
	} `json:"metadata"`
}

// multiline decodes nbformat's "multiline string": a string or an array of strings.
func multiline(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []string
	if json.Unmarshal(raw, &parts) == nil {
		return strings.Join(parts, "")
	}
	return ""
}

// readNotebook renders a notebook's cells with their outputs as text, each cell numbered as the model would
// cite it, and its image outputs (PNG, JPEG) as image blocks.
func readNotebook(path, name string) result {
	data, over, err := readFileAtMost(path, maxNotebookBytes)
	if err != nil {
		return errorf("read %s: %s", name, fsErrorMessage(err))
	}
	if over {
		return errorf("read: notebook %s exceeds %d-byte limit", name, maxNotebookBytes)
	}
	var nb notebook
	if err := json.Unmarshal(data, &nb); err != nil {
		return errorf("read: %s is not a Jupyter notebook (invalid JSON: %v)", name, err)
	}
	lang := nb.Metadata.LanguageInfo.Name
	var b strings.Builder
	var images []apitype.ContentBlock
	skipped := 0
	for i, c := range nb.Cells {
		kind := c.CellType
		if kind == "code" && lang != "" {
			kind += " (" + lang + ")"
		}
		fmt.Fprintf(&b, "<cell %d type=%q>\n%s\n", i+1, kind, strings.TrimRight(multiline(c.Source), "\n"))
		for _, o := range c.Outputs {
			switch o.OutputType {
			case "stream":
				fmt.Fprintf(&b, "<output %s>\n%s\n</output>\n", o.Name, strings.TrimRight(multiline(o.Text), "\n"))
			case "error":
				fmt.Fprintf(&b, "<output error>\n%s: %s\n</output>\n", o.EName, o.EValue)
			case "execute_result", "display_data":
				for _, mt := range []string{"image/png", "image/jpeg"} {
					raw, ok := o.Data[mt]
					if !ok {
						continue
					}
					if len(images) >= maxNotebookImages {
						skipped++
						break
					}
					enc := strings.Join(strings.Fields(multiline(raw)), "")
					if _, err := base64.StdEncoding.DecodeString(enc); err != nil || len(enc) > MaxImageBytes*4/3 {
						skipped++
						break
					}
					src, _ := json.Marshal(apitype.ImageSource{Type: apitype.SourceBase64, MediaType: mt, Data: enc})
					images = append(images, apitype.ContentBlock{Type: apitype.ContentImage, Source: src})
					fmt.Fprintf(&b, "<output image %d (%s)>\n", len(images), mt)
					break
				}
				if text, ok := o.Data["text/plain"]; ok {
					fmt.Fprintf(&b, "<output result>\n%s\n</output>\n", strings.TrimRight(multiline(text), "\n"))
				}
			}
		}
		b.WriteString("</cell>\n")
	}
	if len(nb.Cells) == 0 {
		b.WriteString("(the notebook has no cells)\n")
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "(%d image outputs not shown: at most %d, each at most %d bytes)\n", skipped, maxNotebookImages, MaxImageBytes)
	}
	return result{text: strings.TrimSuffix(b.String(), "\n"), images: images}
}
