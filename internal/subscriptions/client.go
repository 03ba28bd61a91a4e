// Package subscriptions is the client of supportflow's subscription service
// (protocol documented in package standin, whose stand-in implements it).
//
// The client sends exactly one HTTP request per call and never retries:
// deciding whether a retry is safe belongs to the caller, which learns what
// happened from *Error's Permanent, MayHaveLanded and RetryAfterDelay.
package subscriptions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/supportflow/supportflow/internal/httpretry"
	"github.com/supportflow/supportflow/internal/text"
)

// maxResponseBody bounds how much of a response is read.
const maxResponseBody = 1 << 20

// codeAlreadyCancelled is the error code of a 409 for a cancelled subscription.
const codeAlreadyCancelled = "already_cancelled"

// Client cancels subscriptions through the subscription service's HTTP API.
// It is safe for concurrent use.
type Client struct {
	baseURL string // no trailing slash
	token   string
	http    *http.Client
}

// New returns a client for the service at baseURL (for example
// "https://subs.internal" or "http://127.0.0.1:8081/"), authenticating with
// the bearer token. A nil httpClient means a client with no overall timeout:
// callers bound each call with the context's deadline.
func New(baseURL, token string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: invalid base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("subscriptions: base URL %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("subscriptions: base URL %q has no host", u.Redacted())
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		// Credentials go in the token; a query or fragment would be
		// silently mangled when paths are appended.
		return nil, fmt.Errorf("subscriptions: base URL %q must not have user info, a query or a fragment", u.Redacted())
	}
	if token == "" {
		return nil, errors.New("subscriptions: empty token")
	}
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return &Client{baseURL: strings.TrimSuffix(u.String(), "/"), token: token, http: httpClient}, nil
}

// Cancellation is the outcome of a successful Cancel.
type Cancellation struct {
	// AlreadyCancelled is true when the subscription had been cancelled
	// before this call (for example by an earlier call whose response was
	// lost). The desired end state holds either way.
	AlreadyCancelled bool
	// CancelledAt is when the subscription was cancelled, as reported by the
	// service; zero if it did not say.
	CancelledAt time.Time
}

// Cancel cancels the subscription. idempotencyKey, if not empty, is sent as
// the Idempotency-Key header, on which supportflow requires the service to
// deduplicate: a repeat gets the first request's answer and has no second
// effect, so a retry after a lost answer learns what that request did. A
// conflict saying the subscription is already cancelled (another key, or
// none) counts as success too.
//
// Any failure is an *Error.
func (c *Client) Cancel(ctx context.Context, subscriptionID, idempotencyKey string) (Cancellation, error) {
	if err := checkID(subscriptionID); err != nil {
		return Cancellation{}, err
	}
	// PathEscape also escapes "/", so an ID always stays one path segment.
	u := c.baseURL + "/v1/subscriptions/" + url.PathEscape(subscriptionID) + "/cancel"

	// The request is sent with a body that net/http cannot rewind. Without
	// that, a request carrying Idempotency-Key counts as replayable and
	// http.Transport silently resends it when a reused connection drops:
	// two cancels on the wire for one call.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, io.NopCloser(strings.NewReader("{}")))
	if err != nil {
		return Cancellation{}, &Error{Message: "building request", Err: err, permanent: true}
	}
	req.ContentLength = 2
	req.GetBody = nil
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}

	// Track whether the request left this process, to tell "definitely not
	// applied" from "may have been applied" when no response comes back.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Store(true) },
	}))

	resp, err := c.http.Do(req)
	if err != nil {
		return Cancellation{}, c.transportError(err, wrote.Load())
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))

	var payload struct {
		Status      string `json:"status"`
		CancelledAt string `json:"cancelled_at"`
		Error       string `json:"error"`
		Message     string `json:"message"`
	}
	decodeErr := json.Unmarshal(body, &payload)
	cancelledAt := parseTime(payload.CancelledAt)

	switch {
	case resp.StatusCode == http.StatusOK:
		// The status code alone proves the cancellation happened, so a
		// truncated or odd body is not worth failing (and retrying) over.
		return Cancellation{CancelledAt: cancelledAt}, nil
	case resp.StatusCode == http.StatusConflict && decodeErr == nil && payload.Error == codeAlreadyCancelled:
		return Cancellation{AlreadyCancelled: true, CancelledAt: cancelledAt}, nil
	}

	return Cancellation{}, c.responseError(resp, body, readErr, decodeErr, payload.Error, payload.Message)
}

// responseError is the *Error of an answer that is not a success: the
// service's code and message when its body is in the service's format,
// else a short excerpt (a proxy, a load balancer); the Retry-After of a
// 429 or 503.
func (c *Client) responseError(resp *http.Response, body []byte, readErr, decodeErr error, code, message string) *Error {
	e := &Error{Status: resp.StatusCode, Code: code, Message: message}
	if decodeErr != nil || (e.Code == "" && e.Message == "") {
		e.Code = ""
		e.Message = excerpt(body)
		if readErr != nil {
			e.Err = readErr
		}
	}
	e.Message = c.redact(e.Message)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = httpretry.RetryAfter(resp.Header, time.Now())
	}
	return e
}

// checkID refuses an ID that cannot be one path segment: PathEscape
// leaves dots alone, and a dot segment would address another resource.
func checkID(subscriptionID string) error {
	if subscriptionID == "" || subscriptionID == "." || subscriptionID == ".." {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("invalid subscription ID %q", subscriptionID), permanent: true}
	}
	return nil
}

// transportError wraps an error from http.Client.Do.
func (c *Client) transportError(err error, wroteHeaders bool) *Error {
	var opErr *net.OpError
	dial := errors.As(err, &opErr) && opErr.Op == "dial"
	var dnsErr *net.DNSError
	dial = dial || errors.As(err, &dnsErr)
	return &Error{
		Message: "no response",
		Err:     err,
		// Without the headers on the wire the server cannot have acted.
		notSent: dial || !wroteHeaders,
	}
}

// redact removes the token from text that came from elsewhere (a response
// body could echo request headers).
func (c *Client) redact(s string) string {
	return text.Redact(s, c.token)
}

// Error is a failed call. Status is 0 when no response arrived, in which
// case Err holds the transport error.
type Error struct {
	// Status is the HTTP status code, or 0 when there was no response.
	Status int
	// Code is the service's error code ("not_found", "rate_limited", ...),
	// or "" when the body was not in the service's format.
	Code string
	// Message is the service's message, or an excerpt of the response body.
	Message string
	// RetryAfter is the server's Retry-After on 429 and 503, else 0.
	RetryAfter time.Duration
	// Err is the underlying transport error, if any.
	Err error

	permanent bool // set for errors raised before any request was made
	notSent   bool // no response, and the request never reached the server
}

// Error describes the failure. It never contains the token.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("subscriptions: ")
	if e.Status != 0 {
		fmt.Fprintf(&b, "HTTP %d", e.Status)
		if e.Code != "" {
			fmt.Fprintf(&b, " %s", e.Code)
		}
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
		}
		return b.String()
	}
	b.WriteString(e.Message)
	if e.Err != nil {
		// Transport errors name the URL, never the Authorization header.
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the transport error, so errors.Is(err,
// context.DeadlineExceeded) and the like work.
func (e *Error) Unwrap() error { return e.Err }

// Permanent reports whether retrying the same call can never succeed:
// a bad request, bad credentials, no permission, an unknown subscription
// or an invalid one.
func (e *Error) Permanent() bool {
	if e.permanent {
		return true
	}
	return httpretry.PermanentStatus(e.Status)
}

// MayHaveLanded reports whether the service may have applied the request
// although the call failed: no response after the request was sent
// (timeout, dropped connection), or 500, 502 or 504. It is false when the
// request was definitely not applied: refused before sending, 429, 503 or
// any 4xx. Like pgx's SafeToRetry, false means a retry cannot double-apply.
func (e *Error) MayHaveLanded() bool {
	switch e.Status {
	case 0:
		return !e.notSent && !e.permanent
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfterDelay returns how long the server asked the caller to wait
// (0 when it did not say).
func (e *Error) RetryAfterDelay() time.Duration { return e.RetryAfter }

// parseTime reads an RFC 3339 timestamp, giving the zero time if absent or
// malformed.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// excerpt returns the start of a non-JSON error body for the message.
func excerpt(body []byte) string {
	const n = 200
	s := strings.ToValidUTF8(strings.TrimSpace(string(body)), "\uFFFD")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// Subscription statuses the service reports.
const (
	StatusActive    = "active"
	StatusCancelled = "cancelled"
)

// Subscription is what the service says of one subscription.
type Subscription struct {
	ID string
	// CustomerID is the customer the subscription belongs to; "" when the
	// service did not say.
	CustomerID string
	// Status is "active", "cancelled" or another status the service
	// reports.
	Status string
	// Plan is the subscription's plan; "" when the service did not say.
	Plan string
}

// Lookup reads a subscription (GET /v1/subscriptions/{id}): whose it is,
// its status and plan. It is a read, so any failure is safe to retry;
// Permanent says when retrying cannot help (an unknown subscription is a
// 404). Any failure is an *Error.
func (c *Client) Lookup(ctx context.Context, subscriptionID string) (Subscription, error) {
	if err := checkID(subscriptionID); err != nil {
		return Subscription{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/subscriptions/"+url.PathEscape(subscriptionID), nil)
	if err != nil {
		return Subscription{}, &Error{Message: "building request", Err: err, permanent: true}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return Subscription{}, c.transportError(err, false)
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	var payload struct {
		ID         string `json:"id"`
		CustomerID string `json:"customer_id"`
		Status     string `json:"status"`
		Plan       string `json:"plan"`
		Error      string `json:"error"`
		Message    string `json:"message"`
	}
	decodeErr := json.Unmarshal(body, &payload)
	if resp.StatusCode == http.StatusOK && decodeErr == nil && payload.Status != "" {
		// An answer without an id is about the subscription asked for.
		return Subscription{ID: cmp.Or(payload.ID, subscriptionID), CustomerID: payload.CustomerID, Status: payload.Status, Plan: payload.Plan}, nil
	}
	return Subscription{}, c.responseError(resp, body, readErr, decodeErr, payload.Error, payload.Message)
}

// Status reads a subscription's status ("active", "cancelled" ...): how a
// caller whose cancel call lost its answer learns whether it landed.
// Any failure is an *Error.
func (c *Client) Status(ctx context.Context, subscriptionID string) (string, error) {
	sub, err := c.Lookup(ctx, subscriptionID)
	if err != nil {
		return "", err
	}
	return sub.Status, nil
}
