package apitype

// Stream-only event types: previews of an event that is still being produced (a model answer that streams).
// They are sent only on streams that ask for them (event_deltas), never stored and never listed.
const (
	EventStart EventType = "event_start"
	EventDelta EventType = "event_delta"
)

// Preview is an event_start or event_delta frame:
//
//	{"type":"event_start","event":{"type":"agent.message","id":"sevt_..."}}
//	{"type":"event_delta","event_id":"sevt_...","delta":{"type":"content_delta","index":0,"content":{"type":"text","text":"..."}}}
//
// event_start opens the preview of the event with that id (agent.message or agent.thinking; thinking previews
// are start-only); each event_delta adds a fragment to content[index] of the message (a new index starts a new
// element, dense from 0). The buffered event with the same id concludes the preview.
type Preview struct {
	Type    EventType     `json:"type"`               // event_start or event_delta
	Event   *PreviewEvent `json:"event,omitempty"`    // event_start
	EventID string        `json:"event_id,omitempty"` // event_delta
	Delta   *ContentDelta `json:"delta,omitempty"`    // event_delta
}

// PreviewEvent names the previewed event.
type PreviewEvent struct {
	Type EventType `json:"type"`
	ID   string    `json:"id"`
}

// ContentDelta is a fragment of content[Index] of the previewed message.
type ContentDelta struct {
	Type    DeltaType    `json:"type"` // content_delta
	Index   int          `json:"index"`
	Content ContentBlock `json:"content"`
}

// PreviewStartOf returns the event_start of the event with the given type and id.
func PreviewStartOf(typ EventType, id string) Preview {
	return Preview{Type: EventStart, Event: &PreviewEvent{Type: typ, ID: id}}
}

// PreviewTextDelta returns an event_delta adding text to content[index] of the message with the given id.
func PreviewTextDelta(id string, index int, text string) Preview {
	return Preview{Type: EventDelta, EventID: id,
		Delta: &ContentDelta{Type: DeltaContent, Index: index, Content: TextBlock(text)}}
}

// Previewed returns the type and id of the event a preview is about: for event_start its event, for
// event_delta the agent.message it extends. ok is false for a frame of neither kind.
func (p *Preview) Previewed() (typ EventType, id string, ok bool) {
	switch {
	case p.Type == EventStart && p.Event != nil && p.Event.ID != "":
		return p.Event.Type, p.Event.ID, true
	case p.Type == EventDelta && p.EventID != "" && p.Delta != nil:
		return EventAgentMessage, p.EventID, true
	}
	return "", "", false
}
