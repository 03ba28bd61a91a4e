package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/standin"
)

const testModelKey = "sk-test-model-secret-0123456789"

// newModelEnv starts a model stand-in requiring key and returns it with a
// client that authenticates with clientKey.
func newModelEnv(t *testing.T, key, clientKey string) (*standin.Model, *Client) {
	t.Helper()
	m := standin.NewModel(key)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: clientKey, Model: "gpt-4o-mini"})
	require.NoError(t, err)
	return m, c
}

// draftPrompt is a prompt as the drafting code sends it: instructions, then
// the ticket as a JSON document.
func draftPrompt(t *testing.T, lastCustomerComment string) []Message {
	t.Helper()
	doc, err := json.Marshal(map[string]any{
		"subject":        "Billing question",
		"requester_name": "Ann",
		"comments": []map[string]string{
			{"author": "customer", "body": "Hello, I was charged twice."},
			{"author": "agent", "body": "Sorry about that, checking."},
			{"author": "customer", "body": lastCustomerComment},
		},
		"active_subscriptions": []string{"sub_1", "sub_2"},
	})
	require.NoError(t, err)
	return []Message{
		{Role: RoleSystem, Content: "You draft support replies. Answer a JSON object."},
		{Role: RoleUser, Content: string(doc)},
	}
}

// answer is the JSON object the stand-in's default responder produces.
type answer struct {
	Reply               string   `json:"reply"`
	CancelSubscriptions []string `json:"cancel_subscriptions"`
}

func decodeAnswer(t *testing.T, s string) answer {
	t.Helper()
	var a answer
	require.NoError(t, json.Unmarshal([]byte(s), &a), "content: %s", s)
	return a
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestModelConfigValidation(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no base URL":     {Model: "m"},
		"relative":        {BaseURL: "/v1", Model: "m"},
		"bad scheme":      {BaseURL: "ftp://host/v1", Model: "m"},
		"no host":         {BaseURL: "http:///v1", Model: "m"},
		"query":           {BaseURL: "http://host/v1?x=1", Model: "m"},
		"unparseable":     {BaseURL: "http://[::1", Model: "m"},
		"no model":        {BaseURL: "http://host/v1"},
		"blank model":     {BaseURL: "http://host/v1", Model: "  "},
		"key not in errs": {BaseURL: "ftp://host", APIKey: testModelKey, Model: "m"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrConfig)
			assert.NotContains(t, err.Error(), testModelKey)
		})
	}
	c, err := New(Config{BaseURL: "http://localhost:11434/v1", Model: "llama3.2"})
	require.NoError(t, err)
	assert.Equal(t, "llama3.2", c.Model())
}

func TestModelCompleteStreamsDeterministicAnswer(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, testModelKey)
	msgs := draftPrompt(t, "Thanks, any news?")

	var counts []int
	got, err := c.Complete(testCtx(t), msgs, func(n int) { counts = append(counts, n) })
	require.NoError(t, err)

	a := decodeAnswer(t, got.Text)
	assert.Equal(t, `Hi Ann, thanks for writing about "Billing question". We are looking into it and will follow up shortly.`, a.Reply)
	assert.NotNil(t, a.CancelSubscriptions)
	assert.Empty(t, a.CancelSubscriptions)

	require.Greater(t, len(counts), 1, "one callback per content delta")
	for i, n := range counts {
		assert.Equal(t, i+1, n, "counts increase by one")
	}

	// The same input always gives the same answer; nil onToken is fine.
	again, err := c.Complete(testCtx(t), msgs, nil)
	require.NoError(t, err)
	assert.Equal(t, got.Text, again.Text)
	assert.Equal(t, 2, m.Requests())
	assert.Equal(t, 2, m.Completions())
}

func TestModelCompleteProposesCancellation(t *testing.T) {
	_, c := newModelEnv(t, testModelKey, testModelKey)
	got, err := c.Complete(testCtx(t), draftPrompt(t, "Please CANCEL everything."), nil)
	require.NoError(t, err)
	a := decodeAnswer(t, got.Text)
	assert.Equal(t, []string{"sub_1", "sub_2"}, a.CancelSubscriptions)
	assert.Contains(t, a.Reply, "I have cancelled your subscriptions sub_1, sub_2.")
	assert.True(t, strings.HasPrefix(a.Reply, "Hi Ann, "))
}

func TestModelCompleteSendsChatRequest(t *testing.T) {
	m, c := newModelEnv(t, "", "")
	var mu sync.Mutex
	var seen standin.ChatRequest
	m.SetResponder(func(req standin.ChatRequest) string {
		mu.Lock()
		defer mu.Unlock()
		seen = req
		return `{"reply": "ok", "cancel_subscriptions": []}`
	})
	msgs := []Message{
		{Role: RoleSystem, Content: "sys"},
		{Role: RoleUser, Content: "first"},
		{Role: RoleAssistant, Content: "earlier answer"},
		{Role: RoleUser, Content: "second"},
	}
	got, err := c.Complete(testCtx(t), msgs, nil)
	require.NoError(t, err)
	assert.Equal(t, `{"reply": "ok", "cancel_subscriptions": []}`, got.Text)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "gpt-4o-mini", seen.Model)
	assert.True(t, seen.Stream)
	assert.Equal(t, "json_object", seen.ResponseFormat)
	assert.Equal(t, []standin.ChatMessage{
		{Role: "system", Content: "sys"},
		{Role: "user", Content: "first"},
		{Role: "assistant", Content: "earlier answer"},
		{Role: "user", Content: "second"},
	}, seen.Messages)
}

func TestModelCompleteRejectsBadMessages(t *testing.T) {
	m, c := newModelEnv(t, "", "")
	_, err := c.Complete(testCtx(t), nil, nil)
	require.Error(t, err)
	_, err = c.Complete(testCtx(t), []Message{{Role: "tool", Content: "x"}}, nil)
	require.ErrorContains(t, err, `unknown role "tool"`)
	assert.Equal(t, 0, m.Requests())
}

func TestModelWrongKeyIsPermanent(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, "sk-wrong-key-abcdefghijklmnop")
	_, err := c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusUnauthorized, e.StatusCode)
	assert.Equal(t, "invalid_api_key", e.Code)
	assert.True(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	assert.NotContains(t, err.Error(), "sk-wrong-key-abcdefghijklmnop")
	assert.NotContains(t, err.Error(), testModelKey)
	assert.NotContains(t, fmt.Sprintf("%+v %#v", err, e), "sk-wrong-key")
	assert.Equal(t, 1, m.Requests())
	assert.Equal(t, 0, m.Completions())
}

func TestModelEchoedKeyIsRedacted(t *testing.T) {
	const key = "sk-echoed-secret-key-42"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: key, Model: "m"})
	require.NoError(t, err)
	_, err = c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), key)
	assert.Contains(t, err.Error(), "[REDACTED]")
}

func TestModelRateLimitedHonoursRetryAfter(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, testModelKey)
	m.Inject(standin.ModelFault{Status: http.StatusTooManyRequests, RetryAfter: 3 * time.Second})

	start := time.Now()
	_, err := c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Less(t, time.Since(start), time.Second, "the SDK must not wait and retry")
	assert.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	assert.Equal(t, "rate_limit_exceeded", e.Code)
	assert.False(t, e.Permanent())
	assert.Equal(t, 3*time.Second, e.RetryAfterDelay())
	assert.Equal(t, 1, m.Requests())

	// The fault was used up: the next call completes.
	_, err = c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	require.NoError(t, err)
}

func TestModelUnavailableIsRetryableAndSentOnce(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, testModelKey)
	m.Inject(standin.ModelFault{Status: http.StatusServiceUnavailable, Times: -1})

	_, err := c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusServiceUnavailable, e.StatusCode)
	assert.False(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	assert.Equal(t, "model: HTTP 503: The server is overloaded. Please try again later.", e.Error())
	assert.Equal(t, 1, m.Requests(), "exactly one request per Complete: no SDK retries")
	assert.Equal(t, 0, m.Completions())
}

func TestModelStatusClassification(t *testing.T) {
	for status, permanent := range map[int]bool{
		400: true, 401: true, 403: true, 404: true, 422: true,
		408: false, 409: false, 429: false, 500: false, 502: false, 503: false, 504: false, 418: false,
	} {
		e := &Error{StatusCode: status}
		assert.Equal(t, permanent, e.Permanent(), "status %d", status)
		assert.False(t, e.MayHaveLanded())
	}
}

func TestModelNonOpenAIErrorBody(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		// A proxy in front of the model: HTML, not OpenAI's error object.
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Retry-After-Ms", "1500")
		w.Header().Set("Retry-After", "9")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m"})
	require.NoError(t, err)

	_, err = c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusBadGateway, e.StatusCode)
	assert.False(t, e.Permanent())
	assert.Equal(t, 1500*time.Millisecond, e.RetryAfterDelay(), "retry-after-ms wins")
	assert.Equal(t, 1, calls)
}

func TestModelSilenceHonoursDeadline(t *testing.T) {
	m := standin.NewModel(testModelKey)
	handlerDone := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ServeHTTP(w, r)
		handlerDone <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: testModelKey, Model: "m"})
	require.NoError(t, err)
	m.Inject(standin.ModelFault{Silence: true})

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Complete(ctx, draftPrompt(t, "hi"), nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Contains(t, err.Error(), "after 0 tokens")

	select {
	case <-handlerDone:
	case <-time.After(time.Second):
		t.Fatal("the stand-in's handler is still blocked after the client went away")
	}
	assert.Equal(t, 1, m.Requests())
	assert.Equal(t, 0, m.Completions())
}

func TestModelDeadlineBeforeHeaders(t *testing.T) {
	m, c := newModelEnv(t, "", "")
	m.Inject(standin.ModelFault{Delay: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Complete(ctx, draftPrompt(t, "hi"), nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = c.Complete(ctx, draftPrompt(t, "hi"), nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestModelTokenDelaySlowsStream(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, testModelKey)
	msgs := draftPrompt(t, "hi")
	want, err := c.Complete(testCtx(t), msgs, nil)
	require.NoError(t, err)

	m.Inject(standin.ModelFault{TokenDelay: 10 * time.Millisecond})
	var last int
	start := time.Now()
	got, err := c.Complete(testCtx(t), msgs, func(n int) { last = n })
	require.NoError(t, err)
	assert.Equal(t, want.Text, got.Text)
	assert.GreaterOrEqual(t, time.Since(start), time.Duration(last-1)*10*time.Millisecond)
	assert.Equal(t, 2, m.Completions())
}

func TestModelTokenDelayCutByDeadline(t *testing.T) {
	m, c := newModelEnv(t, "", "")
	m.Inject(standin.ModelFault{TokenDelay: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	var last int
	_, err := c.Complete(ctx, draftPrompt(t, "hi"), func(n int) { last = n })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Positive(t, last, "some tokens arrived before the deadline")
	assert.Contains(t, err.Error(), fmt.Sprintf("after %d tokens", last))
}

func TestModelInvalidJSONIsReturned(t *testing.T) {
	m, c := newModelEnv(t, testModelKey, testModelKey)
	m.Inject(standin.ModelFault{InvalidJSON: true})
	got, err := c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	require.NoError(t, err, "validating the answer is the caller's job")
	assert.True(t, strings.HasPrefix(got.Text, "Sure! "), got.Text)
	assert.False(t, json.Valid([]byte(got.Text)))
}

// sseServer serves a hand-written stream, to see how the client handles
// streams the stand-in never sends.
func sseServer(t *testing.T, write func(w http.ResponseWriter, flush func())) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		write(w, func() { _ = rc.Flush() })
	}))
	t.Cleanup(srv.Close)
	return srv
}

func chunk(content string, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`+"\n\n", content, fr)
}

func TestModelStreamBrokenOff(t *testing.T) {
	for name, tc := range map[string]struct {
		write   func(w http.ResponseWriter, flush func())
		wantErr string
	}{
		"ends without finish or DONE": {
			write: func(w http.ResponseWriter, flush func()) {
				fmt.Fprint(w, chunk(`{"reply":`, ""), chunk(` "x"}`, ""))
			},
			wantErr: "model: stream ended after 2 tokens without finishing",
		},
		"DONE without finish_reason": {
			write: func(w http.ResponseWriter, flush func()) {
				fmt.Fprint(w, chunk(`{}`, ""), "data: [DONE]\n\n")
			},
			wantErr: "model: stream ended after 1 tokens without finishing",
		},
		"no content": {
			write: func(w http.ResponseWriter, flush func()) {
				fmt.Fprint(w, chunk("", "stop"), "data: [DONE]\n\n")
			},
			wantErr: "model: stream ended without any content",
		},
		"in-band error event": {
			write: func(w http.ResponseWriter, flush func()) {
				fmt.Fprint(w, chunk(`{"reply":`, ""))
				fmt.Fprint(w, `data: {"error":{"message":"model crashed","type":"server_error"}}`+"\n\n")
			},
			wantErr: "model: server reported an error after 1 tokens",
		},
		"connection dropped": {
			write: func(w http.ResponseWriter, flush func()) {
				fmt.Fprint(w, chunk(`{"reply":`, ""))
				flush()
				panic(http.ErrAbortHandler)
			},
			wantErr: "model: stream failed after 1 tokens",
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := sseServer(t, tc.write)
			c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m"})
			require.NoError(t, err)
			_, err = c.Complete(testCtx(t), []Message{{Role: RoleUser, Content: "x"}}, nil)
			require.ErrorContains(t, err, tc.wantErr)
			var e *Error
			assert.False(t, errors.As(err, &e), "not an HTTP error")
		})
	}
}

func TestModelIgnoresOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	var mu sync.Mutex
	var auth, org string
	m := standin.NewModel("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth, org = r.Header.Get("Authorization"), r.Header.Get("OpenAI-Organization")
		mu.Unlock()
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "llama3.2"})
	require.NoError(t, err)
	_, err = c.Complete(testCtx(t), draftPrompt(t, "hi"), nil)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, auth, "no key configured: no Authorization header")
	assert.Empty(t, org)
}

func TestModelOddCompatibleServers(t *testing.T) {
	t.Run("error as a plain string", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"context length exceeded"}`))
		}))
		t.Cleanup(srv.Close)
		c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m"})
		require.NoError(t, err)
		_, err = c.Complete(testCtx(t), []Message{{Role: RoleUser, Content: "x"}}, nil)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, http.StatusBadRequest, e.StatusCode)
		assert.Equal(t, "context length exceeded", e.Message)
		assert.True(t, e.Permanent())
	})
	t.Run("stream ignored", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}]}`))
		}))
		t.Cleanup(srv.Close)
		c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m"})
		require.NoError(t, err)
		_, err = c.Complete(testCtx(t), []Message{{Role: RoleUser, Content: "x"}}, nil)
		require.ErrorContains(t, err, `expected an event stream, got Content-Type "application/json"`)
	})
}
