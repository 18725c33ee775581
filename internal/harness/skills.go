package harness

import (
	"strings"

	"github.com/corralhq/corral/internal/sandbox"
)

// system is the system prompt of the session's model calls: the agent's, then a note naming the agent's skills
// by name and description only (the model reads a skill's SKILL.md in the sandbox when it needs it).
func (r *run) system() string {
	if r.skillNote == nil {
		note := r.skillsNote()
		r.skillNote = &note
	}
	if *r.skillNote == "" {
		return r.sess.Agent.System
	}
	if r.sess.Agent.System == "" {
		return *r.skillNote
	}
	return r.sess.Agent.System + "\n\n" + *r.skillNote
}

// skillsNote lists the session's skills as their versions describe them; a skill that cannot be read is left
// out (and logged).
func (r *run) skillsNote() string {
	var b strings.Builder
	for _, ref := range r.sess.Agent.Skills {
		v, err := r.b.cfg.Store.SkillVersionGet(r.ctx, ref.SkillID, ref.Version)
		if err != nil {
			r.b.cfg.Logger.Warn("skill left out of the system prompt", "session", r.sess.ID, "skill", ref.SkillID, "err", err)
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
