package harness

import (
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// system is the system prompt of the thread's model calls: its agent's, then a note naming the agent's skills
// by name and description only (the model reads a skill's SKILL.md in the sandbox when it needs it), then the
// session's memory stores (memoryNote), then, in a multi-agent session, how to work with the other threads
// (threads.go).
func (t *thread) system() string {
	if t.skillNote == nil {
		note := t.skillsNote()
		t.skillNote = &note
	}
	parts := make([]string, 0, 4)
	for _, p := range []string{t.agent.System, *t.skillNote, memoryNote(t.sess.Resources), t.threadsNote()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "\n\n")
}

// skillsNote lists the thread's skills as their versions describe them; a skill that cannot be read is left
// out (and logged).
func (t *thread) skillsNote() string {
	var b strings.Builder
	for _, ref := range t.agent.Skills {
		v, err := t.b.cfg.Store.SkillVersionGet(t.ctx, ref.SkillID, ref.Version)
		if err != nil {
			t.b.cfg.Logger.Warn("skill left out of the system prompt", "session", t.sess.ID, "skill", ref.SkillID, "err", err)
			continue
		}
		if b.Len() == 0 {
			b.WriteString("You have skills: folders of instructions and files for particular tasks, under " +
				sandbox.SkillsMount + "/<name>/ in the sandbox. When a task matches a skill's description, read its " +
				"SKILL.md first and follow it.\n")
		}
		b.WriteString("- " + v.Name + " (" + sandbox.SkillsMount + "/" + v.Name + "/SKILL.md): " + v.Description + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// skills are the skills placed in the session's sandbox: its agent's, and those of the agents its threads may
// run (the roster's), once each.
func (r *run) skills() []apitype.SkillRef {
	if r.roster == nil {
		return r.sess.Agent.Skills
	}
	out := append([]apitype.SkillRef(nil), r.sess.Agent.Skills...)
	for _, a := range r.roster.Agents {
		for _, s := range a.Skills {
			dup := false
			for _, o := range out {
				dup = dup || (o.SkillID == s.SkillID && o.Version == s.Version)
			}
			if !dup {
				out = append(out, s)
			}
		}
	}
	return out
}

// memoryNote tells the agent about the session's memory stores: where each is mounted in the sandbox, whether
// it may write there, the store's name and description as attached, and the resource's instructions. Stores
// that cannot be mounted (sandbox.Recipe.MemoryDirs) are left out.
func memoryNote(resources []apitype.Resource) string {
	dirs, _ := (&sandbox.Recipe{Resources: resources}).MemoryDirs()
	if len(dirs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("You have memory stores: directories of text files under " + apitype.MemoryMount + "/ in the sandbox " +
		"that persist across sessions. Read them before you start; in a read-write store, keep what is worth " +
		"remembering for later sessions as small text files (plain UTF-8, at most " + strconv.Itoa(apitype.MaxMemoryBytes) +
		" bytes each). Changes are saved when your turn ends; links, pipes and other special files are not saved.\n")
	for _, d := range dirs {
		access := "read-write"
		if d.ReadOnly {
			access = "read-only"
		}
		b.WriteString("- " + d.Target + " (" + access + ")")
		if d.Resource.Name != "" {
			b.WriteString(": " + d.Resource.Name)
		}
		if d.Resource.Description != "" {
			b.WriteString(" — " + d.Resource.Description)
		}
		b.WriteString("\n")
		if in := strings.TrimSpace(d.Resource.Instructions); in != "" {
			b.WriteString("  Instructions for this store: " + strings.ReplaceAll(in, "\n", "\n  ") + "\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
