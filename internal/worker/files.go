package worker

import (
	"context"
	"io"

	"github.com/corralhq/corral/internal/workspace"
)

// filesAPI is the workspace's Files and Skills (workspace.Files, workspace.Skills) over the server's HTTP API, with
// the sessions token of the work item the worker holds for each session (held): it reads the content of the
// file resources of a held session and the skill versions of its agent, and uploads a session's outputs, which
// the server scopes to the token's session (as files.Service.CreateOutput does on a server's hands) within the
// server's own file size limit; the per-session quota of outputs is the workspace's (Config.MaxOutputBytes).
type filesAPI struct {
	held *held
}

var (
	_ workspace.Files  = filesAPI{}
	_ workspace.Skills = filesAPI{}
)

// OpenContent returns the content of a file resource of a held session.
func (f filesAPI) OpenContent(ctx context.Context, id string) (io.ReadCloser, error) {
	c, err := f.held.file(id)
	if err != nil {
		return nil, err
	}
	return c.FileContent(ctx, id)
}

// CreateOutput uploads a file of the session's outputs (the server scopes it to the session) and returns its id.
func (f filesAPI) CreateOutput(ctx context.Context, sessionID, name string, content io.Reader) (string, error) {
	c, err := f.held.session(sessionID)
	if err != nil {
		return "", err
	}
	// No MIME type: the server infers it from the name, as it does for the outputs its own hands collect.
	file, err := c.FileUpload(ctx, name, "", content)
	if err != nil {
		return "", err
	}
	return file.ID, nil
}

// OpenSkillArchive returns the name and the zip of a skill version of a held session's agent.
func (f filesAPI) OpenSkillArchive(ctx context.Context, skillID, version string) (string, io.ReadCloser, error) {
	c, err := f.held.skill(skillID)
	if err != nil {
		return "", nil, err
	}
	v, err := c.SkillVersionGet(ctx, skillID, version)
	if err != nil {
		return "", nil, err
	}
	rc, err := c.SkillVersionContent(ctx, skillID, version)
	if err != nil {
		return "", nil, err
	}
	return v.Name, rc, nil
}
