package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/skills"
	"github.com/corralhq/corral/internal/store"
)

const maxSkillDisplayName = 255

// skillUpload is a checked, packed upload: the zip in a temporary file, and what SKILL.md says.
type skillUpload struct {
	meta        *skills.Meta
	zip         *os.File
	displayName string
}

func (u *skillUpload) close() {
	if u.zip != nil {
		u.zip.Close()
		os.Remove(u.zip.Name())
	}
}

// readSkillUpload reads the multipart parts files[] (each named by its path, directories kept: the raw
// Content-Disposition filename, since Part.FileName strips them) or one zip archive, and display_name, and
// packs the files into a zip in a temporary file.
func (s *Server) readSkillUpload(w http.ResponseWriter, r *http.Request) (*skillUpload, error) {
	if s.files == nil {
		return nil, errNoFiles
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, invalid("", "the body must be multipart/form-data with parts files[], got Content-Type %q", r.Header.Get("Content-Type"))
	}
	r.Body = readCloser{deadlineReader{r.Body, http.NewResponseController(w)}, r.Body}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, invalid("", "malformed multipart body: %v", err)
	}
	tmp, err := os.CreateTemp("", "corral-skill-*.zip")
	if err != nil {
		return nil, err
	}
	u := &skillUpload{zip: tmp}
	b := skills.NewBuilder(tmp)
	files := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			u.close()
			return nil, multipartErr(err)
		}
		switch part.FormName() {
		case "display_name":
			v, err := io.ReadAll(io.LimitReader(part, maxSkillDisplayName+1))
			if err != nil {
				u.close()
				return nil, multipartErr(err)
			}
			if len(v) > maxSkillDisplayName {
				u.close()
				return nil, invalid("display_name", "longer than %d bytes", maxSkillDisplayName)
			}
			u.displayName = strings.TrimSpace(string(v))
		case "files[]", "files":
			files++
			if err := addSkillPart(b, part); err != nil {
				u.close()
				return nil, skillErr(err)
			}
		}
	}
	if files == 0 {
		u.close()
		return nil, invalid("files", "required: the skill's files as parts files[] (my-skill/SKILL.md, ...) or one zip")
	}
	if u.meta, err = b.Close(); err != nil {
		u.close()
		return nil, skillErr(err)
	}
	return u, nil
}

// rawFilename is a part's filename as sent, directories included.
func rawFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// addSkillPart adds one part: a zip archive (by name or content type) is spooled, bounded, and unpacked.
func addSkillPart(b *skills.Builder, part *multipart.Part) error {
	name := rawFilename(part)
	ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
	if !strings.HasSuffix(strings.ToLower(name), ".zip") && ct != "application/zip" && ct != "application/x-zip-compressed" {
		return b.Add(name, part)
	}
	spool, err := os.CreateTemp("", "corral-skill-upload-*.zip")
	if err != nil {
		return err
	}
	defer func() { spool.Close(); os.Remove(spool.Name()) }()
	n, err := io.Copy(spool, io.LimitReader(part, skills.MaxArchive+1))
	if err != nil {
		return err
	}
	if n > skills.MaxArchive {
		return fmt.Errorf("%w: the archive is larger than %d bytes", skills.ErrInvalid, skills.MaxArchive)
	}
	return b.AddZip(spool, n)
}

// skillErr maps an upload error: ErrInvalid is the client's (400), a too-large body a 413.
func skillErr(err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return errTooLarge(tooLarge.Limit)
	case errors.Is(err, skills.ErrInvalid):
		return invalid("files", "%s", strings.TrimPrefix(err.Error(), skills.ErrInvalid.Error()+": "))
	}
	return multipartErr(err)
}

// storeSkillZip puts the packed zip into the blob store as the version's archive.
func (s *Server) storeSkillZip(ctx context.Context, u *skillUpload, v *store.SkillVersion) error {
	if _, err := u.zip.Seek(0, io.SeekStart); err != nil {
		return err
	}
	c, err := s.files.PutBlob(ctx, "skills/"+v.SkillID+"/"+v.ID+".zip", u.zip)
	if err != nil {
		return err
	}
	v.BlobKey, v.SHA256, v.Size = c.Key, c.SHA256, c.Size
	return nil
}

func newSkillVersion(skillID string, m *skills.Meta, now time.Time) *store.SkillVersion {
	return &store.SkillVersion{SkillVersion: apitype.SkillVersion{Type: apitype.ObjectSkillVersion,
		ID: strconv.FormatInt(now.UnixMicro(), 10), SkillID: skillID, Name: m.Name, Description: m.Description, CreatedAt: now}}
}

func (s *Server) skillCreate(w http.ResponseWriter, r *http.Request) error {
	u, err := s.readSkillUpload(w, r)
	if err != nil {
		return err
	}
	defer u.close()
	now := s.now()
	sk := &apitype.Skill{Type: apitype.ObjectSkill, ID: apitype.NewID(apitype.PrefixSkill), DisplayName: u.displayName,
		Source: apitype.SkillSource{Type: apitype.SkillSourceCustom}, CreatedAt: now, UpdatedAt: now}
	if sk.DisplayName == "" {
		sk.DisplayName = u.meta.Name
	}
	v := newSkillVersion(sk.ID, u.meta, now)
	sk.LatestVersionID = v.ID
	if err := s.storeSkillZip(r.Context(), u, v); err != nil {
		return err
	}
	if err := s.own(r.Context(), sk.ID); err != nil {
		_ = s.files.DeleteBlob(r.Context(), v.BlobKey)
		return err
	}
	if err := s.store.SkillCreate(r.Context(), sk, v); err != nil {
		_ = s.files.DeleteBlob(r.Context(), v.BlobKey)
		return err
	}
	return writeJSON(w, http.StatusOK, sk)
}

func (s *Server) skillVersionCreate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("skill_id")
	if _, err := s.store.SkillGet(r.Context(), id); err != nil {
		return lookup(err, "skill", id)
	}
	u, err := s.readSkillUpload(w, r)
	if err != nil {
		return err
	}
	defer u.close()
	if prev, err := s.store.SkillVersionGet(r.Context(), id, "latest"); err == nil && prev.Name != u.meta.Name {
		return invalid("files", "SKILL.md names the skill %q; its versions are named %q (a skill's name does not change)", u.meta.Name, prev.Name)
	}
	v := newSkillVersion(id, u.meta, s.now())
	if err := s.storeSkillZip(r.Context(), u, v); err != nil {
		return err
	}
	if err := s.store.SkillVersionCreate(r.Context(), v); err != nil {
		_ = s.files.DeleteBlob(r.Context(), v.BlobKey)
		return lookup(err, "skill", id)
	}
	return writeJSON(w, http.StatusOK, &v.SkillVersion)
}

func (s *Server) skillList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	p, limit, c, err := listParams(q, defaultLimit, maxFileListLimit)
	if err != nil {
		return err
	}
	switch apitype.SkillSourceType(q.str("source")) {
	case "", apitype.SkillSourceCustom:
	case apitype.SkillSourceAnthropic:
		// Anthropic's pre-built skills are not available on this server.
		return writeJSON(w, http.StatusOK, listPage[apitype.Skill]{Data: []apitype.Skill{}})
	default:
		return invalid("source", `must be "custom" or "anthropic"`)
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Skill, error) {
			return s.store.SkillList(r.Context(), inWorkspace(r, p))
		},
		func(sk *apitype.Skill) (time.Time, string) { return sk.CreatedAt, sk.ID })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Skill]{Data: data, NextPage: next})
}

func (s *Server) skillGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("skill_id")
	sk, err := s.store.SkillGet(r.Context(), id)
	if err != nil {
		return lookup(err, "skill", id)
	}
	return writeJSON(w, http.StatusOK, sk)
}

func (s *Server) skillDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("skill_id")
	gone, err := s.store.SkillDelete(r.Context(), id)
	if err != nil {
		return lookup(err, "skill", id)
	}
	for _, v := range gone {
		if s.files == nil {
			break
		}
		if err := s.files.DeleteBlob(r.Context(), v.BlobKey); err != nil {
			s.log.Warn("api: skill archive not deleted", "skill", id, "version", v.ID, "err", err)
		}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "skill_deleted"})
}

func (s *Server) skillVersionList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("skill_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultLimit, maxFileListLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	data, next, _, err := listByCreated(store.ListParams{Desc: true}, limit, c, false,
		func(p *store.ListParams) ([]apitype.SkillVersion, error) {
			vs, err := s.store.SkillVersionList(r.Context(), &store.SkillVersionListParams{SkillID: id, Limit: p.Limit, After: p.After})
			if err != nil {
				return nil, lookup(err, "skill", id)
			}
			out := make([]apitype.SkillVersion, len(vs))
			for i := range vs {
				out[i] = vs[i].SkillVersion
			}
			return out, nil
		},
		func(v *apitype.SkillVersion) (time.Time, string) { return v.CreatedAt, v.ID })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.SkillVersion]{Data: data, NextPage: next})
}

func (s *Server) skillVersionGet(w http.ResponseWriter, r *http.Request) error {
	id, version := r.PathValue("skill_id"), r.PathValue("version")
	v, err := s.store.SkillVersionGet(r.Context(), id, version)
	if err != nil {
		return lookup(err, "skill version", id+"/"+version)
	}
	return writeJSON(w, http.StatusOK, &v.SkillVersion)
}

func (s *Server) skillVersionDelete(w http.ResponseWriter, r *http.Request) error {
	id, version := r.PathValue("skill_id"), r.PathValue("version")
	v, err := s.store.SkillVersionDelete(r.Context(), id, version)
	if err != nil {
		return lookup(err, "skill version", id+"/"+version)
	}
	if s.files != nil {
		if err := s.files.DeleteBlob(r.Context(), v.BlobKey); err != nil {
			s.log.Warn("api: skill archive not deleted", "skill", id, "version", v.ID, "err", err)
		}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": v.ID, "type": "skill_version_deleted"})
}

func (s *Server) skillVersionContent(w http.ResponseWriter, r *http.Request) error {
	if s.files == nil {
		return errNoFiles
	}
	id, version := r.PathValue("skill_id"), r.PathValue("version")
	v, rc, err := s.files.OpenSkill(r.Context(), id, version)
	if err != nil {
		return lookup(err, "skill version", id+"/"+version)
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/zip")
	h.Set("Content-Length", strconv.FormatInt(v.Size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": v.Name + ".zip"}))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(deadlineWriter{w, http.NewResponseController(w)}, rc)
	return nil
}
