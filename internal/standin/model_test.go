package standin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testModelKey = "sk-standin-test-key"

// modelCall posts body to the stand-in and returns the status, the
// Content-Type and the raw answer.
func modelCall(t *testing.T, srv *httptest.Server, method, path, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(raw)
}

// requireOpenAIError checks that raw is OpenAI's error body, with every key
// present, and returns its fields.
func requireOpenAIError(t *testing.T, raw string) map[string]any {
	t.Helper()
	var body map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &body), raw)
	e, ok := body["error"]
	require.True(t, ok, raw)
	for _, k := range []string{"message", "type", "param", "code"} {
		assert.Contains(t, e, k)
	}
	assert.NotEmpty(t, e["message"])
	return e
}

func newModelEnv(t *testing.T, key string) (*Model, *httptest.Server) {
	t.Helper()
	m := NewModel(key)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

// chatService is the real openai-go client pointed at srv.
func chatService(srv *httptest.Server, key string) *openai.ChatCompletionService {
	svc := openai.NewChatCompletionService(
		option.WithBaseURL(srv.URL+"/v1"),
		option.WithAPIKey(key),
		option.WithHTTPClient(srv.Client()),
		option.WithMaxRetries(0),
	)
	return &svc
}

const draftTicketJSON = `{"subject":"Refund","requester_name":"Bo","comments":[{"author":"customer","body":"Please cancel my plan"}],"active_subscriptions":["sub_9"]}`

const draftTicketAnswer = `{"reply":"Hi Bo, thanks for writing about \"Refund\". I have cancelled your subscription sub_9.","cancel_subscriptions":["sub_9"]}`

func TestModelRejectsMalformedRequests(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)

	for name, tc := range map[string]struct {
		body  string
		param any
	}{
		"not JSON":      {`{"model": "m", "messages": [`, nil},
		"no messages":   {`{"model": "m", "messages": []}`, "messages"},
		"no model":      {`{"messages": [{"role": "user", "content": "hi"}]}`, "model"},
		"bad content":   {`{"model": "m", "messages": [{"role": "user", "content": 42}]}`, "messages[0].content"},
		"wrong type":    {`{"model": "m", "messages": "hi"}`, nil},
		"empty body":    {``, nil},
		"array of JSON": {`[1, 2]`, nil},
	} {
		t.Run(name, func(t *testing.T) {
			status, ct, raw := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", testModelKey, tc.body)
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Contains(t, ct, "application/json")
			e := requireOpenAIError(t, raw)
			assert.Equal(t, "invalid_request_error", e["type"])
			assert.Equal(t, tc.param, e["param"])
		})
	}
	assert.Equal(t, 7, m.Requests())
	assert.Equal(t, 0, m.Completions())

	// The real client sees the 400 as an API error, too.
	_, err := chatService(srv, testModelKey).New(t.Context(), openai.ChatCompletionNewParams{Model: "m"})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Equal(t, "invalid_request_error", apiErr.Type)
}

func TestModelAuthentication(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, key := range []string{"", "sk-wrong"} {
		status, _, raw := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", key, body)
		assert.Equal(t, http.StatusUnauthorized, status)
		e := requireOpenAIError(t, raw)
		assert.Equal(t, "invalid_api_key", e["code"])
		assert.Equal(t, "invalid_request_error", e["type"])
		assert.Nil(t, e["param"])
		assert.NotContains(t, raw, "sk-wrong")
		assert.NotContains(t, raw, testModelKey)
	}
	status, _, _ := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", testModelKey, body)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 3, m.Requests())
	assert.Equal(t, 1, m.Completions())

	// Without a key, anything goes, like a local Ollama.
	_, open := newModelEnv(t, "")
	for _, key := range []string{"", "whatever"} {
		status, _, _ := modelCall(t, open, http.MethodPost, "/v1/chat/completions", key, body)
		assert.Equal(t, http.StatusOK, status)
	}
}

func TestModelOnlyServesChatCompletions(t *testing.T) {
	m, srv := newModelEnv(t, "")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

	status, _, raw := modelCall(t, srv, http.MethodPost, "/chat/completions", "", body)
	assert.Equal(t, http.StatusNotFound, status)
	requireOpenAIError(t, raw)

	status, _, raw = modelCall(t, srv, http.MethodGet, "/v1/chat/completions", "", "")
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	requireOpenAIError(t, raw)

	assert.Equal(t, 0, m.Requests())
}

func TestModelNonStreamingWithOpenAIClient(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)
	got, err := chatService(srv, testModelKey).New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("draft"), openai.UserMessage(draftTicketJSON)},
	})
	require.NoError(t, err)
	assert.Equal(t, "chat.completion", string(got.Object))
	assert.Equal(t, "gpt-4o-mini", got.Model)
	assert.True(t, strings.HasPrefix(got.ID, "chatcmpl-"), got.ID)
	require.Len(t, got.Choices, 1)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	assert.Equal(t, "assistant", string(got.Choices[0].Message.Role))
	assert.Equal(t, draftTicketAnswer, got.Choices[0].Message.Content)
	assert.Positive(t, got.Usage.TotalTokens)
	assert.Equal(t, 1, m.Completions())
}

func TestModelStreamingWithOpenAIClient(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)
	stream := chatService(srv, testModelKey).NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:         "gpt-4o-mini",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(draftTicketJSON)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	deltas := 0
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			deltas++
		}
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, draftTicketAnswer, acc.Choices[0].Message.Content)
	assert.Equal(t, "stop", acc.Choices[0].FinishReason)
	assert.Greater(t, deltas, 5, "one delta per word")
	assert.Positive(t, acc.Usage.TotalTokens, "usage chunk parsed")
	assert.Equal(t, int64(deltas), acc.Usage.CompletionTokens)
	assert.Equal(t, 1, m.Completions())
}

// sseEvents reads a text/event-stream body into its data payloads.
func sseEvents(t *testing.T, raw string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(raw))
	blankAfterData := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blankAfterData = true
			continue
		}
		require.True(t, blankAfterData, "every event is one data line and a blank line")
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q", line)
		out = append(out, data)
		blankAfterData = false
	}
	return out
}

func TestModelStreamWireFormat(t *testing.T) {
	_, srv := newModelEnv(t, "")
	status, ct, raw := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", "",
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "text/event-stream; charset=utf-8", ct)

	events := sseEvents(t, raw)
	require.GreaterOrEqual(t, len(events), 5)
	assert.Equal(t, "[DONE]", events[len(events)-1])

	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	var chunks []chunk
	for _, e := range events[:len(events)-1] {
		var c chunk
		require.NoError(t, json.Unmarshal([]byte(e), &c), e)
		chunks = append(chunks, c)
	}
	var content strings.Builder
	for i, c := range chunks {
		assert.Equal(t, chunks[0].ID, c.ID, "one ID per completion")
		assert.Equal(t, "chat.completion.chunk", c.Object)
		assert.Equal(t, "m", c.Model)
		assert.Positive(t, c.Created)
		switch {
		case i == 0:
			require.Len(t, c.Choices, 1)
			assert.Equal(t, "assistant", c.Choices[0].Delta.Role)
		case i == len(chunks)-1:
			assert.Empty(t, c.Choices, "the usage chunk has no choices")
			require.NotNil(t, c.Usage)
			assert.Positive(t, c.Usage.TotalTokens)
		case i == len(chunks)-2:
			require.Len(t, c.Choices, 1)
			require.NotNil(t, c.Choices[0].FinishReason)
			assert.Equal(t, "stop", *c.Choices[0].FinishReason)
			assert.Nil(t, c.Choices[0].Delta.Content)
		default:
			require.Len(t, c.Choices, 1)
			assert.Nil(t, c.Choices[0].FinishReason)
			require.NotNil(t, c.Choices[0].Delta.Content)
			piece := *c.Choices[0].Delta.Content
			assert.NotEmpty(t, piece)
			assert.LessOrEqual(t, len(strings.Fields(piece)), 1, "one word per chunk: %q", piece)
			content.WriteString(piece)
		}
	}
	assert.Equal(t, `{"reply":"Hi there, thanks for writing to us. We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`, content.String())
}

func TestModelDefaultAnswer(t *testing.T) {
	msgs := func(contents ...string) ChatRequest {
		req := ChatRequest{Model: "m"}
		for _, c := range contents {
			req.Messages = append(req.Messages, ChatMessage{Role: "user", Content: c})
		}
		return req
	}
	for name, tc := range map[string]struct {
		req  ChatRequest
		want string
	}{
		"cancel": {msgs(draftTicketJSON), draftTicketAnswer},
		"several subscriptions": {
			msgs(`{"subject":"S","requester_name":"Cy","comments":[{"author":"customer","body":"cancel please"}],"active_subscriptions":["a","b"," ","a"]}`),
			`{"reply":"Hi Cy, thanks for writing about \"S\". I have cancelled your subscriptions a, b.","cancel_subscriptions":["a","b"]}`,
		},
		"cancel without subscriptions": {
			msgs(`{"subject":"S","requester_name":"Cy","comments":[{"author":"customer","body":"Cancel it"}]}`),
			`{"reply":"Hi Cy, thanks for writing about \"S\". We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`,
		},
		"only the last customer comment counts": {
			msgs(`{"subject":"S","comments":[{"author":"customer","body":"cancel"},{"author":"Customer","body":"never mind"},{"author":"agent","body":"shall I cancel?"}],"active_subscriptions":["a"]}`),
			`{"reply":"Hi there, thanks for writing about \"S\". We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`,
		},
		"not JSON": {
			msgs("please cancel my subscription"),
			`{"reply":"Hi there, thanks for writing to us. We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`,
		},
		"lenient about wrong types": {
			msgs(`{"subject":7,"requester_name":"Di","comments":[{"author":"customer","body":"cancel"}],"active_subscriptions":["s1"]}`),
			`{"reply":"Hi Di, thanks for writing to us. I have cancelled your subscription s1.","cancel_subscriptions":["s1"]}`,
		},
		"last user message wins": {
			ChatRequest{Messages: []ChatMessage{
				{Role: "user", Content: draftTicketJSON},
				{Role: "assistant", Content: `{"subject":"ignored"}`},
				{Role: "user", Content: `{"subject":"Later","requester_name":"Ed"}`},
				{Role: "system", Content: "ignored"},
			}},
			`{"reply":"Hi Ed, thanks for writing about \"Later\". We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`,
		},
		"no user message": {
			ChatRequest{Messages: []ChatMessage{{Role: "system", Content: draftTicketJSON}}},
			`{"reply":"Hi there, thanks for writing to us. We are looking into it and will follow up shortly.","cancel_subscriptions":[]}`,
		},
	} {
		got := defaultModelAnswer(tc.req)
		assert.Equal(t, tc.want, got, name)
		assert.True(t, json.Valid([]byte(got)), name)
		assert.Equal(t, got, defaultModelAnswer(tc.req), "%s: deterministic", name)
	}
}

func TestModelContentParts(t *testing.T) {
	seenCh := make(chan ChatRequest, 1)
	m, srv := newModelEnv(t, "")
	m.SetResponder(func(req ChatRequest) string { seenCh <- req; return "{}" })
	status, _, _ := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", "",
		`{"model":"m","response_format":{"type":"json_object"},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},{"role":"assistant","content":null}]}`)
	require.Equal(t, http.StatusOK, status)
	seen := <-seenCh
	assert.Equal(t, ChatRequest{
		Model:          "m",
		Messages:       []ChatMessage{{Role: "user", Content: "ab"}, {Role: "assistant", Content: ""}},
		ResponseFormat: "json_object",
	}, seen)

	// nil restores the default answer.
	m.SetResponder(nil)
	_, _, raw := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", "",
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	assert.Contains(t, raw, `Hi there`)
}

func TestModelFaultTimesAndStatus(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	arrived := make(chan struct{}, 10)
	m.Inject(ModelFault{Status: http.StatusTooManyRequests, RetryAfter: 1500 * time.Millisecond, Times: 2, Arrived: arrived})
	m.Inject(ModelFault{Status: http.StatusServiceUnavailable, Times: -1})

	for range 2 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		// Faults come before authentication, as with the other stand-ins.
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), "rounded up")
		e := requireOpenAIError(t, string(raw))
		assert.Equal(t, "rate_limit_exceeded", e["code"])
	}
	assert.Len(t, arrived, 2)
	for range 3 {
		status, _, raw := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", testModelKey, body)
		assert.Equal(t, http.StatusServiceUnavailable, status)
		e := requireOpenAIError(t, raw)
		assert.Equal(t, "server_error", e["type"])
	}
	m.ClearFaults()
	status, _, _ := modelCall(t, srv, http.MethodPost, "/v1/chat/completions", testModelKey, body)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 6, m.Requests())
	assert.Equal(t, 1, m.Completions())
}

func TestModelInvalidJSONFault(t *testing.T) {
	m, srv := newModelEnv(t, "")
	m.Inject(ModelFault{InvalidJSON: true})
	got, err := chatService(srv, "").New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(draftTicketJSON)},
	})
	require.NoError(t, err)
	assert.Equal(t, invalidJSONPrefix+draftTicketAnswer, got.Choices[0].Message.Content)
	assert.False(t, json.Valid([]byte(got.Choices[0].Message.Content)))
}

// waitHandlers wraps m so a test can wait for its handlers to return.
func waitHandlers(t *testing.T, m *Model) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	done := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ServeHTTP(w, r)
		done <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return srv, done
}

func TestModelWaitsEndWhenClientLeaves(t *testing.T) {
	for name, f := range map[string]ModelFault{
		"delay":             {Delay: time.Minute},
		"token delay":       {TokenDelay: time.Minute},
		"silent stream":     {Silence: true},
		"silent non-stream": {Silence: true},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewModel("")
			srv, done := waitHandlers(t, m)
			m.Inject(f)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			stream := name != "silent non-stream"
			body := `{"model":"m","stream":` + map[bool]string{true: "true", false: "false"}[stream] +
				`,"messages":[{"role":"user","content":"hi"}]}`
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			require.NoError(t, err)
			resp, err := srv.Client().Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatal("handler still running after the client went away")
			}
			assert.Equal(t, 1, m.Requests())
			assert.Equal(t, 0, m.Completions())
		})
	}
}

func TestModelListen(t *testing.T) {
	m := NewModel(testModelKey)
	s, err := Listen(m, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	svc := openai.NewChatCompletionService(option.WithBaseURL(s.URL()+"/v1"), option.WithAPIKey(testModelKey), option.WithMaxRetries(0))
	got, err := svc.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(draftTicketJSON)},
	})
	require.NoError(t, err)
	assert.Equal(t, draftTicketAnswer, got.Choices[0].Message.Content)
}

// HoldAfter stops the stream after that many chunks until Hold is closed:
// the client has those chunks, and not one more, while it is held.
func TestModelHoldsMidAnswer(t *testing.T) {
	m, srv := newModelEnv(t, testModelKey)
	hold := make(chan struct{})
	m.Inject(ModelFault{HoldAfter: 3, Hold: hold})
	stream := chatService(srv, testModelKey).NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(draftTicketJSON)},
	})
	deltas := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		for stream.Next() {
			if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				deltas <- c.Choices[0].Delta.Content
			}
		}
		done <- stream.Err()
	}()
	for range 3 {
		select {
		case <-deltas:
		case <-time.After(10 * time.Second):
			t.Fatal("the first chunks never came")
		}
	}
	select {
	case d := <-deltas:
		t.Fatalf("a chunk past the hold arrived: %q", d)
	case <-done:
		t.Fatal("the stream ended while held")
	case <-time.After(300 * time.Millisecond):
	}
	close(hold)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not finish once released")
	}
	assert.Equal(t, 1, m.Completions())
}
