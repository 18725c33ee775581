package httpfetch

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"codeberg.org/readeck/go-readability/v2"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"
)

// decodeText decodes a text body in its declared (or sniffed) charset into UTF-8.
func decodeText(body []byte, label string) (string, error) {
	if label == "" && utf8.Valid(body) {
		return string(body), nil
	}
	r, err := charset.NewReaderLabel(label, bytes.NewReader(body))
	if err != nil {
		r, err = charset.NewReader(bytes.NewReader(body), "")
		if err != nil {
			return "", fmt.Errorf("cannot decode charset %q", label)
		}
	}
	b, err := io.ReadAll(r)
	return string(b), err
}

// htmlToMarkdown finds the readable part of an HTML page (go-readability, the port of Mozilla's Readability that
// Readeck maintains) and writes it as Markdown. A page readability finds no article in (a listing, a short page)
// is converted whole, its body without scripts, styles and navigation.
func htmlToMarkdown(body []byte, label string, u *url.URL) (title, text string, err error) {
	s, err := decodeText(body, label)
	if err != nil {
		return "", "", err
	}
	doc, err := html.Parse(strings.NewReader(s))
	if err != nil {
		return "", "", err
	}
	var root *html.Node
	if readability.CheckDocument(doc) {
		if art, err := readability.FromDocument(doc, u); err == nil && art.Node != nil {
			title, root = art.Title(), art.Node
		}
		// FromDocument may change doc: parse again for the fallback.
		if root == nil {
			doc, _ = html.Parse(strings.NewReader(s))
		}
	}
	if root == nil {
		title = docTitle(doc)
		root = find(doc, atom.Body)
		if root == nil {
			root = doc
		}
	}
	m := &mdWriter{base: u}
	m.block(root)
	text = strings.TrimSpace(blankLines.ReplaceAllString(m.sb.String(), "\n\n"))
	if title != "" && !strings.HasPrefix(text, "# ") {
		text = "# " + strings.TrimSpace(title) + "\n\n" + text
	}
	return strings.TrimSpace(title), text, nil
}

var blankLines = regexp.MustCompile(`\n[ \t]*(\n[ \t]*)+`)

func find(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, a); f != nil {
			return f
		}
	}
	return nil
}

func docTitle(doc *html.Node) string {
	if t := find(doc, atom.Title); t != nil {
		return strings.Join(strings.Fields(textOf(t)), " ")
	}
	return ""
}

func textOf(n *html.Node) string {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return sb.String()
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// mdWriter writes HTML as Markdown: headings, paragraphs, links, emphasis, code, lists, quotes and tables as
// rows of cells; what is not content (scripts, styles, forms, navigation) is left out.
type mdWriter struct {
	sb    strings.Builder
	base  *url.URL
	list  []int // per open list: 0 unordered, else the next number
	quote int
}

func (m *mdWriter) newline(n int) {
	s := m.sb.String()
	have := len(s) - len(strings.TrimRight(s, "\n"))
	if len(s) == 0 {
		return
	}
	for ; have < n; have++ {
		m.sb.WriteByte('\n')
		if m.quote > 0 {
			m.sb.WriteString(strings.Repeat("> ", m.quote))
		}
	}
}

func (m *mdWriter) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		m.block(c)
	}
}

var skip = map[atom.Atom]bool{atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true, atom.Head: true,
	atom.Nav: true, atom.Form: true, atom.Button: true, atom.Select: true, atom.Textarea: true, atom.Input: true, atom.Iframe: true,
	atom.Svg: true, atom.Canvas: true}

func (m *mdWriter) block(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		t := strings.Join(strings.Fields(n.Data), " ")
		if t == "" {
			if strings.TrimSpace(n.Data) == "" && n.Data != "" && !strings.HasSuffix(m.sb.String(), " ") && !strings.HasSuffix(m.sb.String(), "\n") {
				m.sb.WriteByte(' ')
			}
			return
		}
		if n.Data[0] == ' ' || n.Data[0] == '\n' || n.Data[0] == '\t' {
			if s := m.sb.String(); s != "" && !strings.HasSuffix(s, " ") && !strings.HasSuffix(s, "\n") {
				m.sb.WriteByte(' ')
			}
		}
		m.sb.WriteString(t)
		if last := n.Data[len(n.Data)-1]; last == ' ' || last == '\n' || last == '\t' {
			m.sb.WriteByte(' ')
		}
		return
	case html.ElementNode:
	default:
		m.children(n)
		return
	}
	if skip[n.DataAtom] || attr(n, "hidden") != "" || attr(n, "aria-hidden") == "true" {
		return
	}
	switch n.DataAtom {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		m.newline(2)
		m.sb.WriteString(strings.Repeat("#", int(n.Data[1]-'0')) + " ")
		m.sb.WriteString(strings.Join(strings.Fields(textOf(n)), " "))
		m.newline(2)
	case atom.P, atom.Div, atom.Section, atom.Article, atom.Main, atom.Header, atom.Footer, atom.Aside, atom.Figure,
		atom.Figcaption, atom.Dl, atom.Table, atom.Details, atom.Summary:
		m.newline(2)
		m.children(n)
		m.newline(2)
	case atom.Dt, atom.Dd, atom.Tr:
		m.newline(1)
		m.children(n)
		m.newline(1)
	case atom.Td, atom.Th:
		if n.PrevSibling != nil {
			m.sb.WriteString(" | ")
		}
		m.children(n)
	case atom.Br:
		m.newline(1)
	case atom.Hr:
		m.newline(2)
		m.sb.WriteString("---")
		m.newline(2)
	case atom.Pre:
		m.newline(2)
		m.sb.WriteString("```\n" + strings.Trim(textOf(n), "\n") + "\n```")
		m.newline(2)
	case atom.Code, atom.Kbd, atom.Samp:
		m.sb.WriteString("`" + textOf(n) + "`")
	case atom.Strong, atom.B:
		m.wrap(n, "**")
	case atom.Em, atom.I:
		m.wrap(n, "_")
	case atom.Blockquote:
		m.newline(2)
		m.quote++
		m.sb.WriteString("> ")
		m.children(n)
		m.quote--
		m.newline(2)
	case atom.Ul, atom.Ol:
		m.newline(1)
		k := 0
		if n.DataAtom == atom.Ol {
			k = 1
		}
		m.list = append(m.list, k)
		m.children(n)
		m.list = m.list[:len(m.list)-1]
		m.newline(2)
	case atom.Li:
		m.newline(1)
		depth := len(m.list)
		marker := "- "
		if depth > 0 && m.list[depth-1] > 0 {
			marker = fmt.Sprintf("%d. ", m.list[depth-1])
			m.list[depth-1]++
		}
		m.sb.WriteString(strings.Repeat("  ", max(depth-1, 0)) + marker)
		m.children(n)
		m.newline(1)
	case atom.A:
		label := strings.Join(strings.Fields(textOf(n)), " ")
		href := attr(n, "href")
		if ref, err := m.base.Parse(href); err == nil && href != "" && !strings.HasPrefix(href, "#") &&
			(ref.Scheme == "http" || ref.Scheme == "https") && label != "" {
			m.sb.WriteString("[" + label + "](" + ref.String() + ")")
			return
		}
		m.children(n)
	case atom.Img:
		if alt := strings.TrimSpace(attr(n, "alt")); alt != "" {
			m.sb.WriteString("[image: " + alt + "]")
		}
	default:
		m.children(n)
	}
}

func (m *mdWriter) wrap(n *html.Node, mark string) {
	t := strings.Join(strings.Fields(textOf(n)), " ")
	if t == "" {
		return
	}
	m.sb.WriteString(mark + t + mark)
}
