package standin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// ChatCompletionsPath is the one path the model stand-in serves. Point an
// OpenAI-compatible client at server.URL + "/v1".
const ChatCompletionsPath = "/v1/chat/completions"

// maxModelRequestBody bounds a request body; prompts are small, this only
// protects the stand-in.
const maxModelRequestBody = 8 << 20

// invalidJSONPrefix is what an InvalidJSON fault puts before the answer: the
// chatty preamble a model produces when it ignores the JSON instruction.
const invalidJSONPrefix = "Sure! Here is a reply: "

// ModelFault describes one misbehaviour of the model stand-in. It is
// separate from Fault because a model misbehaves in ways HTTP faults cannot
// express (slow or silent streams, answers that are not JSON), and because
// every wait here ends as soon as the client goes away, where Fault's delays
// deliberately outlive the client to model a write that lands anyway: a
// completion has no effect worth finishing.
//
// Every fault applies to every POST /v1/chat/completions, in injection
// order. A matched fault runs in this order: Arrived is notified, Delay is
// slept, then either Status is answered or the request is answered
// normally (after authentication and validation) with the answer and stream
// altered by TokenDelay, Silence and InvalidJSON.
type ModelFault struct {
	// Times is how many requests the fault applies to: 0 means 1, a
	// negative value means forever.
	Times int
	// Status, if non-zero, is answered instead of completing, with an error
	// body in OpenAI's shape.
	Status int
	// RetryAfter, with Status, sets the Retry-After header in whole seconds
	// (rounded up).
	RetryAfter time.Duration
	// Delay is slept before answering anything: a model slow to start.
	Delay time.Duration
	// TokenDelay, with streaming, is slept between chunks: a slow stream.
	TokenDelay time.Duration
	// Silence, with streaming, sends the headers and the first (role-only,
	// contentless) chunk, then nothing until the client goes away: a model
	// that never answers. Without streaming nothing at all is sent.
	Silence bool
	// InvalidJSON answers normally, but with content that is not a JSON
	// object: the answer prefixed with chatter.
	InvalidJSON bool
	// Code, with Status, is the error's code (and, for OpenAI's billing
	// codes such as "insufficient_quota", its type too), as OpenAI answers
	// an account out of quota with a 429 that is not a rate limit.
	Code string
	// TruncateAfter, when > 0, stops the answer after that many chunks
	// with finish_reason "length", as a model does at max_completion_tokens.
	TruncateAfter int
	// Arrived, if non-nil, is notified (non-blocking send) when a request
	// the fault applies to arrives, so a test can act mid-call.
	Arrived chan<- struct{}
	// HoldAfter, when > 0 with Hold, stops the stream after that many
	// chunks until Hold is closed (or the caller goes away): a model that
	// is mid-answer for as long as a test needs to watch it.
	HoldAfter int
	Hold      <-chan struct{}
}

// modelFaults is the model's fault list, with the same Times semantics as
// Faults; every request applies.
type modelFaults struct {
	q faultQueue[ModelFault]
}

func (fs *modelFaults) inject(f ModelFault) { fs.q.inject(f, f.Times) }
func (fs *modelFaults) clear()              { fs.q.clear() }
func (fs *modelFaults) next() *ModelFault {
	return fs.q.take(func(*ModelFault) bool { return true })
}

// ChatMessage is one message of a chat-completions request.
type ChatMessage struct {
	Role string
	// Content is the message text; an array of content parts is reduced to
	// its text parts, concatenated.
	Content string
}

// ChatRequest is a decoded chat-completions request, as a responder sees
// it.
type ChatRequest struct {
	Model    string
	Messages []ChatMessage
	// Stream is the request's "stream".
	Stream bool
	// ResponseFormat is response_format.type ("json_object", ...), or ""
	// when absent.
	ResponseFormat string
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
}

// Model is an http.Handler that stands in for an OpenAI-compatible
// chat-completions server (see the package doc). It is safe for concurrent
// use.
type Model struct {
	apiKey string

	faults      modelFaults
	requests    atomic.Int64
	completions atomic.Int64
	nextID      atomic.Int64

	mu        sync.Mutex
	responder func(ChatRequest) string
	meter     meter
	// contextWindow, when > 0, refuses longer prompts (SetContextWindow).
	contextWindow atomic.Int64
}

// SetContextWindow makes prompts longer than tokens (counted as a
// tokenizer would, about four bytes a token) fail with OpenAI's 400
// context_length_exceeded; 0 removes the limit.
func (m *Model) SetContextWindow(tokens int) { m.contextWindow.Store(int64(tokens)) }

// promptTokens counts a request's prompt about as a tokenizer does for
// English: four bytes a token, plus a few for each message's framing.
func promptTokens(req ChatRequest) int64 {
	var n int64
	for _, msg := range req.Messages {
		n += int64(len(msg.Content)+3)/4 + 4
	}
	return n
}

// NewModel returns a chat-completions stand-in that requires
// "Authorization: Bearer <apiKey>"; apiKey "" accepts any or no
// Authorization, like a local Ollama.
func NewModel(apiKey string) *Model {
	return &Model{apiKey: apiKey}
}

// Inject adds a fault; see ModelFault.
func (m *Model) Inject(f ModelFault) { m.faults.inject(f) }

// ClearFaults removes every injected fault.
func (m *Model) ClearFaults() { m.faults.clear() }

// Requests returns how many POST /v1/chat/completions were received,
// including rejected and faulted ones: the number of attempts a client made.
func (m *Model) Requests() int { return int(m.requests.Load()) }

// Completions returns how many completions were answered in full (for a
// stream, up to and including "data: [DONE]").
func (m *Model) Completions() int { return int(m.completions.Load()) }

// SetResponder replaces the default answer (see the package doc) with
// respond's result for every later request; nil restores the default.
// respond may be called concurrently.
func (m *Model) SetResponder(respond func(req ChatRequest) string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.responder = respond
}

func (m *Model) answer(req ChatRequest) string {
	m.mu.Lock()
	respond := m.responder
	m.mu.Unlock()
	if respond == nil {
		respond = defaultModelAnswer
	}
	return respond(req)
}

// ServeHTTP implements http.Handler.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != ChatCompletionsPath {
		writeOpenAIError(w, http.StatusNotFound, "invalid_request_error", "", "",
			fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeOpenAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "",
			fmt.Sprintf("Method %s is not allowed for %s", r.Method, r.URL.Path))
		return
	}
	m.requests.Add(1)
	m.meter.serve(w, r, func(w http.ResponseWriter) {
		writeOpenAIError(w, http.StatusTooManyRequests, "requests", "", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later.")
	}, func() { m.serve(w, r) })
}

// SetRateLimit makes the stand-in answer 429 rate_limit_exceeded with
// Retry-After to requests over limit in any window (a minute when 0), as a
// provider enforces RPM, and resets Load; limit 0 only measures.
func (m *Model) SetRateLimit(limit int, window time.Duration) { m.meter.setLimit(limit, window) }

// Load is the pace completions were requested at, and the most streamed at
// once.
func (m *Model) Load() Load { return m.meter.get() }

func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// Read the whole body first: only then does net/http watch the
	// connection and cancel ctx when the client goes away, which every
	// wait below relies on.
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxModelRequestBody))

	f := m.faults.next()
	if f != nil {
		if f.Arrived != nil {
			select {
			case f.Arrived <- struct{}{}:
			default:
			}
		}
		if !sleepContext(ctx, f.Delay) {
			return // the client went away; nobody to answer
		}
		if f.Status != 0 {
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(f.RetryAfter), 10))
			}
			if f.Code == "insufficient_quota" {
				// https://platform.openai.com/docs/guides/error-codes
				writeOpenAIError(w, f.Status, "insufficient_quota", "", f.Code,
					"You exceeded your current quota, please check your plan and billing details.")
				return
			}
			writeOpenAIFault(w, f.Status)
			return
		}
	}

	if !m.authorized(r) {
		writeOpenAIError(w, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key",
			"Incorrect API key provided.")
		return
	}
	req, ok := decodeChatRequest(w, raw, err)
	if !ok {
		return
	}
	if window := m.contextWindow.Load(); window > 0 {
		if n := promptTokens(req); n > window {
			// As OpenAI answers a prompt over the model's context window.
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "messages", "context_length_exceeded",
				fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, n))
			return
		}
	}
	content := m.answer(req)
	if f != nil && f.InvalidJSON {
		content = invalidJSONPrefix + content
	}
	if req.Stream {
		m.stream(ctx, w, req, content, f)
		return
	}
	if f != nil && f.Silence {
		<-ctx.Done()
		return
	}
	// Count before answering, so that a client that has its answer always
	// sees it counted.
	m.completions.Add(1)
	writeJSON(w, http.StatusOK, completionJSON{
		ID:      m.newCompletionID(),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Choices: []completionChoiceJSON{{
			Index:        0,
			Message:      completionMessageJSON{Role: "assistant", Content: content},
			FinishReason: "stop",
		}},
		Usage: usageFor(req, content),
	})
}

// authorized reports whether r carries the bearer key, or no key is needed.
func (m *Model) authorized(r *http.Request) bool {
	if m.apiKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(m.apiKey)) == 1
}

// stream answers content as a text/event-stream of chat.completion.chunk
// events, one word per chunk, the way OpenAI streams: a role chunk, content
// chunks, a chunk with the finish reason, an optional usage chunk, then
// [DONE].
func (m *Model) stream(ctx context.Context, w http.ResponseWriter, req ChatRequest, content string, f *ModelFault) {
	var tokenDelay time.Duration
	silence := false
	if f != nil {
		tokenDelay, silence = f.TokenDelay, f.Silence
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	base := chunkJSON{
		ID:      m.newCompletionID(),
		Object:  "chat.completion.chunk",
		Created: time.Now().Unix(),
		Model:   req.Model,
	}
	send := func(choices []chunkChoiceJSON, usage *usageJSON) bool {
		c := base
		c.Choices, c.Usage = choices, usage
		body, err := json.Marshal(c)
		if err != nil {
			panic("standin: encode chunk: " + err.Error()) // our own types: a bug
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", body); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	empty := ""
	if !send([]chunkChoiceJSON{{Delta: deltaJSON{Role: "assistant", Content: &empty}}}, nil) {
		return
	}
	if silence {
		<-ctx.Done()
		return
	}
	stop := "stop"
	for i, piece := range splitWords(content) {
		if f != nil && f.TruncateAfter > 0 && i == f.TruncateAfter {
			stop = "length"
			break
		}
		if i > 0 && !sleepContext(ctx, tokenDelay) {
			return
		}
		if f != nil && f.Hold != nil && f.HoldAfter > 0 && i == f.HoldAfter {
			select {
			case <-f.Hold:
			case <-ctx.Done():
				return
			}
		}
		if !send([]chunkChoiceJSON{{Delta: deltaJSON{Content: &piece}}}, nil) {
			return
		}
	}
	if !send([]chunkChoiceJSON{{FinishReason: &stop}}, nil) {
		return
	}
	if req.IncludeUsage {
		usage := usageFor(req, content)
		if !send([]chunkChoiceJSON{}, &usage) {
			return
		}
	}
	// Count before the last write, so that a client that has seen [DONE]
	// always sees the completion counted; undo it if the write fails.
	m.completions.Add(1)
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil || rc.Flush() != nil {
		m.completions.Add(-1)
	}
}

func (m *Model) newCompletionID() string {
	return fmt.Sprintf("chatcmpl-standin%08d", m.nextID.Add(1))
}

// sleepContext sleeps for d, or until ctx is done; it reports whether the
// full duration passed.
func sleepContext(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// splitWords splits s into pieces that each end with the whitespace after a
// word, so the pieces concatenate back to s and a client sees one delta per
// word.
func splitWords(s string) []string {
	var out []string
	start := 0
	inSpace := false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if inSpace && !space {
			out = append(out, s[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// --- request decoding ---

// chatRequestJSON is the subset of a chat-completions body the stand-in
// reads.
type chatRequestJSON struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream         bool `json:"stream"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// decodeChatRequest decodes and validates the body (raw, or the error
// reading it), answering 400 (or 413) itself when it is unusable.
func decodeChatRequest(w http.ResponseWriter, raw []byte, err error) (ChatRequest, bool) {
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeOpenAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "",
				"Request body is too large.")
			return ChatRequest{}, false
		}
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", "",
			"Could not read the request body.")
		return ChatRequest{}, false
	}
	var body chatRequestJSON
	if err := json.Unmarshal(raw, &body); err != nil {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", "",
			"We could not parse the JSON body of your request: "+err.Error())
		return ChatRequest{}, false
	}
	if body.Model == "" {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "model", "",
			"you must provide a model parameter")
		return ChatRequest{}, false
	}
	if len(body.Messages) == 0 {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "messages", "",
			"'messages' must contain at least one message.")
		return ChatRequest{}, false
	}
	req := ChatRequest{Model: body.Model, Stream: body.Stream}
	if body.ResponseFormat != nil {
		req.ResponseFormat = body.ResponseFormat.Type
	}
	if body.StreamOptions != nil {
		req.IncludeUsage = body.StreamOptions.IncludeUsage
	}
	for i, msg := range body.Messages {
		content, ok := messageText(msg.Content)
		if !ok {
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error",
				fmt.Sprintf("messages[%d].content", i), "",
				fmt.Sprintf("Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i))
			return ChatRequest{}, false
		}
		req.Messages = append(req.Messages, ChatMessage{Role: msg.Role, Content: content})
	}
	return req, true
}

// messageText reads a message's content: a string, an array of content
// parts (whose text parts are concatenated), or null/absent.
func messageText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), true
}

// --- response wire types ---

// completionJSON is a non-streamed chat.completion.
type completionJSON struct {
	ID      string                 `json:"id"`
	Object  string                 `json:"object"`
	Created int64                  `json:"created"`
	Model   string                 `json:"model"`
	Choices []completionChoiceJSON `json:"choices"`
	Usage   usageJSON              `json:"usage"`
}

type completionChoiceJSON struct {
	Index        int                   `json:"index"`
	Message      completionMessageJSON `json:"message"`
	Logprobs     *struct{}             `json:"logprobs"`
	FinishReason string                `json:"finish_reason"`
}

type completionMessageJSON struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// chunkJSON is one chat.completion.chunk event of a stream.
type chunkJSON struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chunkChoiceJSON `json:"choices"`
	Usage   *usageJSON        `json:"usage,omitempty"`
}

type chunkChoiceJSON struct {
	Index        int       `json:"index"`
	Delta        deltaJSON `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type deltaJSON struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// usageFor counts words as tokens: deterministic, and close enough for a
// stand-in.
func usageFor(req ChatRequest, content string) usageJSON {
	prompt := 0
	for _, msg := range req.Messages {
		prompt += len(strings.Fields(msg.Content))
	}
	completion := len(splitWords(content))
	return usageJSON{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeOpenAIError answers status with an error in OpenAI's shape; empty
// param and code are sent as null, as OpenAI does.
func writeOpenAIError(w http.ResponseWriter, status int, typ, param, code, message string) {
	body := openAIErrorBody{Message: message, Type: typ}
	if param != "" {
		body.Param = &param
	}
	if code != "" {
		body.Code = &code
	}
	writeJSON(w, status, openAIError{Error: body})
}

// writeOpenAIFault answers an injected status with the error OpenAI sends
// for it.
func writeOpenAIFault(w http.ResponseWriter, status int) {
	typ, code, msg := "invalid_request_error", "", fmt.Sprintf("injected fault: HTTP %d", status)
	switch {
	case status == http.StatusUnauthorized:
		code, msg = "invalid_api_key", "Incorrect API key provided."
	case status == http.StatusNotFound:
		code, msg = "model_not_found", "The model does not exist or you do not have access to it."
	case status == http.StatusTooManyRequests:
		typ, code, msg = "requests", "rate_limit_exceeded", "Rate limit reached. Please try again later."
	case status == http.StatusServiceUnavailable:
		typ, msg = "server_error", "The server is overloaded. Please try again later."
	case status >= 500:
		typ, msg = "server_error", "The server had an error while processing your request."
	}
	writeOpenAIError(w, status, typ, "", code, msg)
}

// --- the default answer ---

// draftContext is the JSON document the drafting code sends as the last
// user message.
type draftContext struct {
	Subject       string `json:"subject"`
	RequesterName string `json:"requester_name"`
	Comments      []struct {
		// Author is the comment's role: "requester", "end_user",
		// "agent" or "supportflow" ("customer" in older prompts).
		Author string `json:"author"`
		Body   string `json:"body"`
		ID     int64  `json:"id"`
	} `json:"comments"`
	ActiveSubscriptions []string `json:"active_subscriptions"`
}

// draftAnswer is the JSON object the default responder answers.
type draftAnswer struct {
	Reply               string           `json:"reply"`
	CancelSubscriptions []string         `json:"cancel_subscriptions"`
	AskedIn             map[string]int64 `json:"asked_in,omitempty"`
}

// defaultModelAnswer is the deterministic answer described in the package
// doc: a greeting, and a cancellation of every active subscription when the
// requester's last comment asks to cancel. Another end user's comment (a
// CC) never counts: only the requester may ask for their own cancellation.
func defaultModelAnswer(req ChatRequest) string {
	var dc draftContext
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			dc = parseDraftContext(req.Messages[i].Content)
			break
		}
	}
	name := strings.TrimSpace(dc.RequesterName)
	if name == "" {
		name = "there"
	}
	var reply strings.Builder
	fmt.Fprintf(&reply, "Hi %s, thanks for writing", name)
	if subject := strings.TrimSpace(dc.Subject); subject != "" {
		fmt.Fprintf(&reply, " about \"%s\". ", subject)
	} else {
		reply.WriteString(" to us. ")
	}

	var lastCustomer string
	var lastCustomerID int64
	for i := len(dc.Comments) - 1; i >= 0; i-- {
		if a := dc.Comments[i].Author; strings.EqualFold(a, "requester") || strings.EqualFold(a, "customer") {
			lastCustomer, lastCustomerID = dc.Comments[i].Body, dc.Comments[i].ID
			break
		}
	}
	// Blank and repeated IDs are dropped: the drafting code rejects an
	// answer that lists a subscription twice.
	var active []string
	for _, id := range dc.ActiveSubscriptions {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(active, id) {
			active = append(active, id)
		}
	}
	out := draftAnswer{CancelSubscriptions: []string{}}
	if strings.Contains(strings.ToLower(lastCustomer), "cancel") && len(active) > 0 {
		noun := "subscription"
		if len(active) > 1 {
			noun = "subscriptions"
		}
		fmt.Fprintf(&reply, "I have cancelled your %s %s.", noun, strings.Join(active, ", "))
		out.CancelSubscriptions = active
		if lastCustomerID != 0 {
			out.AskedIn = map[string]int64{}
			for _, id := range active {
				out.AskedIn[id] = lastCustomerID
			}
		}
	} else {
		reply.WriteString("We are looking into it and will follow up shortly.")
	}
	out.Reply = reply.String()
	body, err := json.Marshal(out)
	if err != nil {
		panic("standin: encode answer: " + err.Error()) // our own type: a bug
	}
	return string(body)
}

// parseDraftContext reads s leniently: fields of the wrong type are skipped,
// and text that is not JSON gives the zero context.
func parseDraftContext(s string) draftContext {
	var dc draftContext
	err := json.Unmarshal([]byte(strings.TrimSpace(s)), &dc)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return draftContext{}
	}
	return dc
}
