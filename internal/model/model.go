// Package model is supportflow's client for drafting support replies with a
// language model over the OpenAI chat-completions protocol. The same client
// talks to OpenAI, to OpenAI-compatible local servers (Ollama, llama.cpp)
// and to the in-process stand-in of package standin.
//
// It is a thin layer over github.com/openai/openai-go/v3 that fixes three
// things for supportflow's activities:
//
//   - It never retries. The SDK retries twice by default, which would hide
//     failures from Temporal and multiply each attempt's latency; here one
//     Complete is exactly one HTTP request and Temporal owns every retry.
//   - It always streams, so a slow model makes visible progress (onToken,
//     which the activity turns into heartbeats) and a silent one is caught
//     by the activity's heartbeat timeout instead of a long fixed timeout.
//   - Its errors say what the caller can do next, the same way the other
//     clients' errors do: *Error has Permanent, MayHaveLanded and
//     RetryAfterDelay, and a cancelled or expired context is always
//     visible through errors.Is.
//
// The client reads no OPENAI_* environment variables: everything comes from
// Config, so a key meant for OpenAI can never be sent to a local server by
// accident.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/supportflow/supportflow/internal/httpretry"
	"github.com/supportflow/supportflow/internal/text"
)

// ErrConfig is wrapped by every error New returns, so a caller can tell a
// misconfiguration (fix the settings) from a failure to reach the model.
var ErrConfig = errors.New("model: invalid configuration")

// Config says which server and model to use.
type Config struct {
	// BaseURL is the API base that "/chat/completions" is appended to, for
	// example "https://api.openai.com/v1" or "http://localhost:11434/v1"
	// (Ollama). Required: there is deliberately no default, so a
	// misconfigured local run cannot silently reach a paid API.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>". It may be empty
	// for servers without authentication (Ollama, llama.cpp), in which case
	// no Authorization header is sent. It is a secret: it is never logged
	// or put in an error.
	APIKey string
	// Model is the model name sent with every request, e.g. "gpt-4o-mini".
	// Required.
	Model string
	// MaxCompletionTokens caps the answer (max_completion_tokens); 0 sends
	// no cap. An answer that reaches it is a *TruncatedError.
	MaxCompletionTokens int64
	// HTTPClient carries every request. nil means a new http.Client without
	// an overall timeout: deadlines come from the context of each call (the
	// activity's), since a fixed client timeout would cut off long but
	// healthy streams.
	HTTPClient *http.Client
}

// Client drafts replies with one model on one server. It is safe for
// concurrent use.
type Client struct {
	completions openai.ChatCompletionService
	model       string
	maxTokens   int64
	apiKey      string // kept only to scrub it from server-provided text
}

// New returns a client for cfg. It checks the configuration but does not
// contact the server, so a worker can start while the model is down.
// Errors wrap ErrConfig and never contain the API key.
func New(cfg Config) (*Client, error) {
	if strings.TrimSpace(cfg.BaseURL) == "" {
		return nil, fmt.Errorf("%w: BaseURL is required", ErrConfig)
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		// The parse error quotes the URL, which is not secret, but keep
		// the message short and uniform.
		return nil, fmt.Errorf("%w: BaseURL does not parse as a URL", ErrConfig)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: BaseURL %q: scheme must be http or https", ErrConfig, u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: BaseURL %q has no host", ErrConfig, u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// Request paths are resolved against the base; a query or fragment
		// would be dropped or misplaced.
		return nil, fmt.Errorf("%w: BaseURL %q must not have a query or fragment", ErrConfig, u.Redacted())
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("%w: Model is required", ErrConfig)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(hc),
		// Retries belong to Temporal: one Complete, one request.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	// The service is built directly rather than through openai.NewClient,
	// which would merge in OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID,
	// OPENAI_CUSTOM_HEADERS and others from the environment.
	return &Client{
		completions: openai.NewChatCompletionService(opts...),
		model:       cfg.Model,
		maxTokens:   cfg.MaxCompletionTokens,
		apiKey:      cfg.APIKey,
	}, nil
}

// Model returns the configured model name, for recording which model wrote
// a draft.
func (c *Client) Model() string { return c.model }

// Message roles accepted by Complete.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one chat message of a prompt.
type Message struct {
	// Role is RoleSystem, RoleUser or RoleAssistant.
	Role string
	// Content is the message text.
	Content string
}

// Usage is what one completion cost, as the server counted it
// (stream_options.include_usage): zero when the server did not say.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Completion is a finished answer and what it cost.
type Completion struct {
	Text  string
	Usage Usage
}

// Complete asks the model for one chat completion whose answer is a JSON
// object (response_format {"type":"json_object"}) and returns the answer's
// text and its token usage. The text is not checked: whether it is the JSON
// the caller asked for is the caller's decision, since only it knows the
// schema.
//
// The completion is streamed with stream_options.include_usage, so the
// server's own token counts arrive in a last chunk whose choices are empty
// (https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options).
// onToken, if not nil, is called after every chunk that adds content, with
// the number of such chunks received so far (1, 2, 3, ...), so a caller can
// heartbeat and report progress; it runs on the calling goroutine and
// should be quick.
//
// Complete sends exactly one request and never retries. Its errors:
//
//   - the server answered with an HTTP error status: *Error (Kind says
//     which: quota exhausted, context too long, rate limited, ...);
//   - the answer stopped at the token limit (finish_reason "length"): a
//     *TruncatedError, permanent: the same request stops at the same place;
//   - ctx was cancelled or its deadline passed, before or during the
//     stream: an error wrapping ctx.Err(), so errors.Is(err,
//     context.DeadlineExceeded) holds;
//   - the stream broke off, carried an in-band error, ended without any
//     content, or ended without a finish reason: a plain error saying how
//     many tokens had arrived. These are transient and worth retrying;
//   - msgs is empty or has an unknown role: a plain error (a caller bug).
func (c *Client) Complete(ctx context.Context, msgs []Message, onToken func(tokens int)) (Completion, error) {
	if len(msgs) == 0 {
		return Completion{}, errors.New("model: no messages")
	}
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(c.model),
		Messages: make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONObject: &shared.ResponseFormatJSONObjectParam{},
		},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if c.maxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(c.maxTokens)
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case RoleAssistant:
			params.Messages = append(params.Messages, openai.AssistantMessage(m.Content))
		default:
			return Completion{}, fmt.Errorf("model: message %d has unknown role %q", i, m.Role)
		}
	}

	// The SDK turns an error status into *openai.Error unless its body has
	// an "error" member it cannot decode (such as {"error": "text"}), in
	// which case only the decoding error comes back; keeping the raw
	// response still gives the status and Retry-After.
	var resp *http.Response
	stream := c.completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
	defer stream.Close()

	var content strings.Builder
	var usage Usage
	tokens := 0
	finish := ""
	for stream.Next() {
		chunk := stream.Current()
		if u := chunk.Usage; u.PromptTokens > 0 || u.CompletionTokens > 0 {
			usage = Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // only one choice is ever requested
			}
			if choice.Delta.Content != "" {
				content.WriteString(choice.Delta.Content)
				tokens++
				if onToken != nil {
					onToken(tokens)
				}
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return Completion{Usage: usage}, c.streamError(ctx, err, resp, tokens)
	}
	if finish == "length" {
		// The answer hit max_completion_tokens or the context window: it
		// is cut off, and the same request is cut off the same way.
		// https://platform.openai.com/docs/api-reference/chat/object#chat-object-choices
		return Completion{Usage: usage}, &TruncatedError{Tokens: tokens, Usage: usage}
	}
	if tokens > 0 && finish != "" {
		return Completion{Text: content.String(), Usage: usage}, nil
	}
	if ctx.Err() != nil {
		return Completion{Usage: usage}, fmt.Errorf("model: completion interrupted after %d tokens: %w", tokens, ctx.Err())
	}
	if tokens == 0 {
		if ct := contentType(resp); ct != "" && ct != "text/event-stream" {
			// A server that ignored "stream": true.
			return Completion{}, fmt.Errorf("model: expected an event stream, got Content-Type %q", ct)
		}
		return Completion{Usage: usage}, errors.New("model: stream ended without any content")
	}
	// The SDK ends a stream quietly on EOF as well as on [DONE], so a
	// missing finish_reason is the only sign of a truncated stream.
	return Completion{Usage: usage}, fmt.Errorf("model: stream ended after %d tokens without finishing", tokens)
}

// TruncatedError is an answer the model stopped at its token limit
// (finish_reason "length"): the JSON is cut off. Sending the same request
// again stops at the same place, so it is permanent; a shorter prompt or a
// higher MaxCompletionTokens is the fix.
type TruncatedError struct {
	Tokens int
	Usage  Usage
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("model: the answer was cut off at the token limit (finish_reason length) after %d chunks, %d completion tokens",
		e.Tokens, e.Usage.CompletionTokens)
}

// Permanent is true: the same request is cut off the same way.
func (e *TruncatedError) Permanent() bool { return true }

// MayHaveLanded is false: a completion changes nothing.
func (e *TruncatedError) MayHaveLanded() bool { return false }

// Kind is KindTruncated.
func (e *TruncatedError) Kind() string { return KindTruncated }

// streamError turns an error from the SDK's stream into Complete's error.
func (c *Client) streamError(ctx context.Context, err error, resp *http.Response, tokens int) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		// Copy what is needed: *openai.Error keeps the request, whose
		// headers hold the API key.
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		e := c.newError(apiErr.StatusCode, apiErr.Code, apiErr.Message, h)
		e.Type = c.redact(apiErr.Type)
		return e
	}
	if ctx.Err() != nil {
		return fmt.Errorf("model: completion interrupted after %d tokens: %w", tokens, ctx.Err())
	}
	if resp != nil && resp.StatusCode >= 400 {
		// An error status whose body the SDK could not decode, such as
		// {"error": "text"} from some OpenAI-compatible servers.
		return c.newError(resp.StatusCode, "", plainErrorMessage(resp), resp.Header)
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return fmt.Errorf("model: server reported an error after %d tokens: %s", tokens, c.redact(streamErr.Message))
	}
	return fmt.Errorf("model: stream failed after %d tokens: %w", tokens, err)
}

// plainErrorMessage returns the message of an error body of the form
// {"error": "text"}, or "". The SDK has already read the body and left a
// copy in resp.Body.
func plainErrorMessage(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ""
	}
	var payload struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &payload) != nil {
		return ""
	}
	return payload.Error
}

// contentType returns the media type of resp, or "" when unknown.
func contentType(resp *http.Response) string {
	if resp == nil {
		return ""
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// newError builds an *Error from a response.
func (c *Client) newError(status int, code, message string, h http.Header) *Error {
	return &Error{
		StatusCode: status,
		Code:       c.redact(code),
		Message:    c.redact(message),
		RetryAfter: httpretry.RetryAfter(h, time.Now()),
	}
}

// redact removes the API key from text the server sent: a server may echo
// the credential it rejected.
func (c *Client) redact(s string) string {
	return text.Redact(s, c.apiKey)
}

// Error is an HTTP error status from the model server.
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is OpenAI's error code ("invalid_api_key",
	// "rate_limit_exceeded", ...), or "" when the server sent none.
	Code string
	// Type is OpenAI's error type ("invalid_request_error",
	// "insufficient_quota", ...), or "".
	Type string
	// Message is the server's error message, or "" when the body was not
	// OpenAI's error object.
	Message string
	// RetryAfter is how long the server asked the caller to wait before
	// retrying (retry-after-ms or Retry-After), or 0 when it did not say.
	RetryAfter time.Duration
}

// Error describes the failure, such as "model: HTTP 503: overloaded". It
// never contains the API key or any request header.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model: HTTP %d", e.StatusCode)
	switch {
	case e.Message != "":
		fmt.Fprintf(&b, ": %s", e.Message)
	case e.Code != "":
		fmt.Fprintf(&b, ": %s", e.Code)
	case http.StatusText(e.StatusCode) != "":
		fmt.Fprintf(&b, ": %s", http.StatusText(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// What a model failure is, for metrics and the activity's error type.
const (
	// KindQuota: the account has no quota left (429 insufficient_quota and
	// its billing codes). Waiting does not help; someone must add credit.
	KindQuota = "quota_exhausted"
	// KindContextLength: the prompt is longer than the model's context
	// window (400 context_length_exceeded).
	KindContextLength = "context_length_exceeded"
	// KindRateLimit: too many requests or tokens per minute (429); retried
	// after Retry-After.
	KindRateLimit = "rate_limited"
	// KindTruncated: the answer stopped at the token limit.
	KindTruncated = "truncated"
	// KindOther is every other failure.
	KindOther = "other"
)

// quotaCodes are the error codes (and the type) OpenAI answers with a 429
// when the account is out of money, not over a rate: retrying does not
// restore access. https://platform.openai.com/docs/guides/error-codes
var quotaCodes = []string{"insufficient_quota", "credit_balance_exhausted", "organization_spend_limit_exceeded",
	"project_spend_limit_exceeded", "organization_usage_limit_exceeded"}

// Kind classifies the failure (KindQuota, KindContextLength, ...).
func (e *Error) Kind() string {
	switch {
	case slices.Contains(quotaCodes, e.Code) || slices.Contains(quotaCodes, e.Type):
		return KindQuota
	case e.Code == "context_length_exceeded":
		return KindContextLength
	case e.StatusCode == http.StatusTooManyRequests:
		return KindRateLimit
	}
	return KindOther
}

// Permanent reports whether sending the same request again cannot succeed:
// a malformed request (400, 422, a prompt over the context window), bad
// credentials (401), no access (403), an unknown model or endpoint (404),
// or an account out of quota (429 insufficient_quota: only a person adding
// credit helps, so retrying it like a rate limit only burns attempts).
// Everything else (408, 409, a rate-limit 429, 5xx, unusual statuses) may
// pass on a later attempt.
func (e *Error) Permanent() bool {
	return httpretry.PermanentStatus(e.StatusCode) || e.Kind() == KindQuota
}

// MayHaveLanded is always false: a completion changes nothing anywhere, so
// retrying it can never apply anything twice.
func (e *Error) MayHaveLanded() bool { return false }

// RetryAfterDelay returns how long the server asked the caller to wait (0
// when it did not say), for the retry policy to honour.
func (e *Error) RetryAfterDelay() time.Duration { return e.RetryAfter }
