package api_test

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
)

const testSkillMD = "---\nname: csv-tools\ndescription: Reads and writes CSV files.\n---\n# CSV tools\n"

func skillFiles(files ...string) []io.Reader {
	var out []io.Reader
	for i := 0; i+1 < len(files); i += 2 {
		out = append(out, anthropic.File(strings.NewReader(files[i+1]), files[i], "text/plain"))
	}
	return out
}

// TestSkillsSDK: a skill created from files through the SDK, a second version, the latest alias, the list,
// the content as a zip holding the files, and the deletions.
func TestSkillsSDK(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	h := newHarness(t, withFiles(t, dir, 1<<20))
	ctx := ctxT(t)
	sk, err := h.client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{
		Files: skillFiles("csv/SKILL.md", testSkillMD, "csv/scripts/read.py", "print(1)\n")})
	if err != nil {
		t.Fatal(err)
	}
	if !apitype.HasPrefix(sk.ID, apitype.PrefixSkill) || sk.DisplayName != "csv-tools" || sk.Source.Type != "custom" || sk.LatestVersionID == "" {
		t.Fatalf("skill %s", sk.RawJSON())
	}
	v1 := sk.LatestVersionID
	v2, err := h.client.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{
		Files: skillFiles("csv/SKILL.md", strings.Replace(testSkillMD, "Reads and", "Reads, checks and", 1))})
	if err != nil {
		t.Fatal(err)
	}
	if v2.SkillID != sk.ID || v2.Name != "csv-tools" || v2.Description != "Reads, checks and writes CSV files." || v2.ID == v1 {
		t.Fatalf("version %s", v2.RawJSON())
	}
	latest, err := h.client.Beta.Skills.Versions.Get(ctx, "latest", anthropic.BetaSkillVersionGetParams{SkillID: sk.ID})
	if err != nil || latest.ID != v2.ID {
		t.Fatalf("latest: %v %+v", err, latest)
	}
	vs, err := h.client.Beta.Skills.Versions.List(ctx, sk.ID, anthropic.BetaSkillVersionListParams{})
	if err != nil || len(vs.Data) != 2 || vs.Data[0].ID != v2.ID || vs.Data[1].ID != v1 {
		t.Fatalf("versions: %v %s", err, vs.RawJSON())
	}
	// Paged one at a time by the SDK: newest first, the last page names no next page.
	var paged []string
	iter := h.client.Beta.Skills.Versions.ListAutoPaging(ctx, sk.ID, anthropic.BetaSkillVersionListParams{Limit: anthropic.Int(1)})
	for iter.Next() {
		paged = append(paged, iter.Current().ID)
	}
	if err := iter.Err(); err != nil || strings.Join(paged, ",") != v2.ID+","+v1 {
		t.Fatalf("versions paged by 1: %v %v", paged, err)
	}
	// A page token of another kind (an event list's) is refused, not read as the start of the list.
	if code, _, body := h.do("GET", "/v1/skills/"+sk.ID+"/versions?page=eyJzIjo1fQ", ""); code != http.StatusBadRequest || !strings.Contains(string(body), "invalid page token") {
		t.Errorf("a sequence page token: %d %s", code, body)
	}
	list, err := h.client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{})
	if err != nil || len(list.Data) != 1 || list.Data[0].ID != sk.ID || list.Data[0].LatestVersionID != v2.ID {
		t.Fatalf("skills: %v %s", err, list.RawJSON())
	}
	resp, err := h.client.Beta.Skills.Versions.Download(ctx, v1, anthropic.BetaSkillVersionDownloadParams{SkillID: sk.ID})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		got[f.Name] = string(b)
	}
	if len(got) != 2 || got["csv/SKILL.md"] != testSkillMD || got["csv/scripts/read.py"] != "print(1)\n" {
		t.Fatalf("content of v1: %v", got)
	}
	if _, err := h.client.Beta.Skills.Versions.Delete(ctx, v2.ID, anthropic.BetaSkillVersionDeleteParams{SkillID: sk.ID}); err != nil {
		t.Fatal(err)
	}
	if again, err := h.client.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{}); err != nil || again.LatestVersionID != v1 {
		t.Fatalf("after deleting v2: %v %+v", err, again)
	}
	if _, err := h.client.Beta.Skills.Delete(ctx, sk.ID, anthropic.BetaSkillDeleteParams{}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.Beta.Skills.Get(ctx, sk.ID, anthropic.BetaSkillGetParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	if n := blobCount(t, dir); n != 0 {
		t.Errorf("%d archives left after the skill's deletion", n)
	}
}

// TestSkillsRefused: a skill whose files escape their directory, lack SKILL.md or its front matter, or come as a
// zip with a link, is a 400 and stores nothing.
func TestSkillsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	h := newHarness(t, withFiles(t, dir, 1<<20))
	ctx := ctxT(t)
	var linkZip bytes.Buffer
	zw := zip.NewWriter(&linkZip)
	w, _ := zw.Create("csv/SKILL.md")
	_, _ = w.Write([]byte(testSkillMD))
	hdr := &zip.FileHeader{Name: "csv/passwd"}
	hdr.SetMode(fs.ModeSymlink | 0o777)
	w, _ = zw.CreateHeader(hdr)
	_, _ = w.Write([]byte("/etc/passwd"))
	_ = zw.Close()
	for name, files := range map[string][]io.Reader{
		"dotdot":          skillFiles("csv/SKILL.md", testSkillMD, "csv/../../etc/x", "x"),
		"absolute":        skillFiles("/csv/SKILL.md", testSkillMD),
		"no SKILL.md":     skillFiles("csv/README.md", "x"),
		"no front matter": skillFiles("csv/SKILL.md", "# just markdown\n"),
		"link in a zip":   {anthropic.File(bytes.NewReader(linkZip.Bytes()), "csv.zip", "application/zip")},
	} {
		_, err := h.client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: files})
		wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
		if t.Failed() {
			t.Fatalf("case %s", name)
		}
	}
	if n := blobCount(t, dir); n != 0 {
		t.Errorf("%d blobs stored by refused uploads", n)
	}
	// A zip of good files is accepted.
	var good bytes.Buffer
	zw = zip.NewWriter(&good)
	w, _ = zw.Create("csv/SKILL.md")
	_, _ = w.Write([]byte(testSkillMD))
	_ = zw.Close()
	if _, err := h.client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{
		Files: []io.Reader{anthropic.File(bytes.NewReader(good.Bytes()), "csv.zip", "application/zip")}}); err != nil {
		t.Fatalf("a good zip: %v", err)
	}
}

// TestAgentSkills: an agent's custom skill resolves to its latest version; Anthropic's pre-built skills and
// unknown skills are refused with a clear 400.
func TestAgentSkills(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFiles(t, filepath.Join(t.TempDir(), "blobs"), 1<<20))
	ctx := ctxT(t)
	sk, err := h.client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{Files: skillFiles("csv/SKILL.md", testSkillMD)})
	if err != nil {
		t.Fatal(err)
	}
	st, _, body := h.do(http.MethodPost, "/v1/agents", `{"name":"a","model":"m","skills":[{"type":"custom","skill_id":"`+sk.ID+`"}]}`)
	var a apitype.Agent
	decodeRaw(t, string(body), &a)
	if st != http.StatusOK || len(a.Skills) != 1 || a.Skills[0].Version != sk.LatestVersionID {
		t.Fatalf("agent with a custom skill: %d %s", st, body)
	}
	st, _, body = h.do(http.MethodPost, "/v1/agents", `{"name":"a","model":"m","skills":[{"type":"anthropic","skill_id":"xlsx"}]}`)
	if st != http.StatusBadRequest || !strings.Contains(string(body), "not available on this server") {
		t.Errorf("an Anthropic skill: %d %s", st, body)
	}
	st, _, body = h.do(http.MethodPost, "/v1/agents", `{"name":"a","model":"m","skills":[{"type":"custom","skill_id":"skill_missing"}]}`)
	if st != http.StatusBadRequest || !strings.Contains(string(body), "skill_missing") {
		t.Errorf("an unknown skill: %d %s", st, body)
	}
}
