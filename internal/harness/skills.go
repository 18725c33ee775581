package harness

import (
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// system is the system prompt of the thread's model calls: its agent's, then a note naming the agent's skills
// by name and description only (the model reads a skill's SKILL.md in the sandbox when it needs it), then, in a
// multi-agent session, how to work with the other threads (threads.go).
func (t *thread) system() string {
	if t.skillNote == nil {
		note := t.skillsNote()
		t.skillNote = &note
	}
	parts := make([]string, 0, 3)
	for _, p := range []string{t.agent.System, *t.skillNote, t.threadsNote()} {
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
