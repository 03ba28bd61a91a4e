package standin

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Subscription statuses of the subscription service.
const (
	SubscriptionActive    = "active"
	SubscriptionCancelled = "cancelled"
)

// subscriptionsPrefix is the path every subscription resource lives under.
const subscriptionsPrefix = "/v1/subscriptions/"

// subscription is the stand-in's state for one subscription.
type subscription struct {
	customerID    string
	plan          string
	status        string
	cancelledAt   time.Time
	cancellations int      // successful active→cancelled transitions
	cancelCalls   int      // every cancel request received
	keys          []string // Idempotency-Key of every cancel request that had one
	// answered holds, by Idempotency-Key, the answer of the first cancel
	// request with that key that the service handled; a later request
	// with the key gets it again and changes nothing.
	answered map[string]storedAnswer
	replays  int // cancel requests answered from answered
}

// storedAnswer is a cancel request's answer, kept for its key's repeats.
type storedAnswer struct {
	status int
	body   []byte
}

// Subscriptions is an http.Handler that stands in for supportflow's
// subscription service (protocol in the package doc). It is safe for
// concurrent use.
type Subscriptions struct {
	token string

	faults Faults
	log    requestLog
	mux    *http.ServeMux

	mu   sync.Mutex
	subs map[string]*subscription
	// unknownCalls counts cancel calls for IDs not (yet) seeded, so
	// CancelCalls also reports calls that were answered 404.
	unknownCalls map[string]int
}

// NewSubscriptions returns a stand-in that accepts "Bearer <token>".
func NewSubscriptions(token string) *Subscriptions {
	s := &Subscriptions{
		token:        token,
		subs:         make(map[string]*subscription),
		unknownCalls: make(map[string]int),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/subscriptions/{id}/cancel", s.cancel)
	mux.HandleFunc("GET /v1/subscriptions/{id}", s.show)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeSubsError(w, http.StatusNotFound, "not_found", "no route for "+r.Method+" "+r.URL.Path)
	})
	s.mux = mux
	return s
}

// Inject adds a fault; see Fault.
func (s *Subscriptions) Inject(f Fault) { s.faults.Inject(f) }

// ClearFaults removes every injected fault.
func (s *Subscriptions) ClearFaults() { s.faults.Clear() }

// Requests returns how many requests with the method ("" for any) and a path
// starting with pathPrefix were received, including failed and faulted ones.
func (s *Subscriptions) Requests(method, pathPrefix string) int {
	return s.log.count(method, pathPrefix)
}

// AddSubscription seeds an active subscription of customerID without a
// plan. Seeding an existing ID resets it to active with no recorded calls
// and no remembered Idempotency-Keys.
func (s *Subscriptions) AddSubscription(id, customerID string) {
	s.AddSubscriptionWithPlan(id, customerID, "")
}

// AddSubscriptionWithPlan seeds an active subscription of customerID on
// plan ("" for none, which GET leaves out), as AddSubscription does.
func (s *Subscriptions) AddSubscriptionWithPlan(id, customerID, plan string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[id] = &subscription{customerID: customerID, plan: plan, status: SubscriptionActive, answered: map[string]storedAnswer{}}
	delete(s.unknownCalls, id)
}

// Status returns the subscription's status, or "" if it is unknown.
func (s *Subscriptions) Status(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return sub.status
	}
	return ""
}

// Cancellations returns how many times the subscription went from active to
// cancelled. An exactly-once cancel leaves this at 1.
func (s *Subscriptions) Cancellations(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return sub.cancellations
	}
	return 0
}

// CancelCalls returns how many cancel requests were received for the
// subscription, including rejected, conflicting, faulted and repeated
// (IdempotentReplays) ones.
func (s *Subscriptions) CancelCalls(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return sub.cancelCalls
	}
	return s.unknownCalls[id]
}

// IdempotencyKeys returns the Idempotency-Key header of every cancel request
// for the subscription that carried one, in arrival order, repeats
// included.
func (s *Subscriptions) IdempotencyKeys(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return slices.Clone(sub.keys)
	}
	return nil
}

// IdempotentReplays returns how many cancel requests for the subscription
// were answered with an earlier request's stored answer (a repeated
// Idempotency-Key), and so had no effect.
func (s *Subscriptions) IdempotentReplays(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return sub.replays
	}
	return 0
}

// ServeHTTP implements http.Handler.
func (s *Subscriptions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.log.add(r)
	// Count the call on arrival, before faults and auth, so that tests see
	// every attempt a client made.
	if id, ok := cancelTarget(r); ok {
		s.recordCancelCall(id, r.Header.Get("Idempotency-Key"))
	}
	f := s.faults.match(r)
	serveWithFault(w, r, f, subsFaultBody, http.HandlerFunc(s.serveAuthenticated))
}

// cancelTarget returns the subscription ID of a cancel request.
func cancelTarget(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost {
		return "", false
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), subscriptionsPrefix)
	if !ok {
		return "", false
	}
	escaped, ok := strings.CutSuffix(rest, "/cancel")
	if !ok || escaped == "" || strings.Contains(escaped, "/") {
		return "", false
	}
	id, err := url.PathUnescape(escaped)
	if err != nil {
		return "", false
	}
	return id, true
}

func (s *Subscriptions) recordCancelCall(id, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		s.unknownCalls[id]++
		return
	}
	sub.cancelCalls++
	if key != "" {
		sub.keys = append(sub.keys, key)
	}
}

// serveAuthenticated routes r if it carries the bearer token.
func (s *Subscriptions) serveAuthenticated(w http.ResponseWriter, r *http.Request) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		writeSubsError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid bearer token")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// subscriptionJSON is the wire form of a subscription.
type subscriptionJSON struct {
	ID          string `json:"id"`
	CustomerID  string `json:"customer_id,omitempty"`
	Plan        string `json:"plan,omitempty"`
	Status      string `json:"status"`
	CancelledAt string `json:"cancelled_at,omitempty"`
}

// cancel cancels an active subscription. A request whose Idempotency-Key
// this subscription's cancel already answered gets that answer again
// (status and body), with no second effect, the way Stripe's idempotent
// requests behave (https://docs.stripe.com/api/idempotent_requests): so a
// caller whose answer was lost learns what its own first request did. The
// key is scoped to the subscription, and only requests the service handled
// are remembered: one refused before it (401, an injected fault) has
// changed nothing, so its key stays unused.
func (s *Subscriptions) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		writeSubsError(w, http.StatusNotFound, "not_found", fmt.Sprintf("subscription %q not found", id))
		return
	}
	if stored, seen := sub.answered[key]; seen && key != "" {
		sub.replays++
		writeRaw(w, stored)
		return
	}
	var answer storedAnswer
	if sub.status == SubscriptionCancelled {
		answer = encodeAnswer(http.StatusConflict, subsError{
			Error:       "already_cancelled",
			Message:     fmt.Sprintf("subscription %q is already cancelled", id),
			CancelledAt: sub.cancelledAt.UTC().Format(time.RFC3339),
		})
	} else {
		sub.status = SubscriptionCancelled
		sub.cancelledAt = time.Now()
		sub.cancellations++
		answer = encodeAnswer(http.StatusOK, subscriptionJSON{
			ID:          id,
			Status:      SubscriptionCancelled,
			CancelledAt: sub.cancelledAt.UTC().Format(time.RFC3339),
		})
	}
	if key != "" {
		sub.answered[key] = answer
	}
	writeRaw(w, answer)
}

// encodeAnswer renders a JSON answer so it can be stored and sent again
// byte for byte.
func encodeAnswer(status int, v any) storedAnswer {
	body, err := json.Marshal(v)
	if err != nil {
		panic("standin: encode answer: " + err.Error()) // our own types: a bug
	}
	return storedAnswer{status: status, body: body}
}

func writeRaw(w http.ResponseWriter, a storedAnswer) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func (s *Subscriptions) show(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		writeSubsError(w, http.StatusNotFound, "not_found", fmt.Sprintf("subscription %q not found", id))
		return
	}
	out := subscriptionJSON{ID: id, CustomerID: sub.customerID, Plan: sub.plan, Status: sub.status}
	if sub.status == SubscriptionCancelled {
		out.CancelledAt = sub.cancelledAt.UTC().Format(time.RFC3339)
	}
	writeJSON(w, http.StatusOK, out)
}

// subsError is the subscription service's error body.
type subsError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	// CancelledAt is set on already_cancelled conflicts.
	CancelledAt string `json:"cancelled_at,omitempty"`
}

func writeSubsError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, subsError{Error: code, Message: message})
}

// subsFaultBody is the error body of an injected status.
func subsFaultBody(status int) any {
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	switch status {
	case http.StatusTooManyRequests:
		code = "rate_limited"
	case http.StatusInternalServerError:
		code = "internal_error"
	case http.StatusServiceUnavailable:
		code = "unavailable"
	}
	if code == "" {
		code = fmt.Sprintf("http_%d", status)
	}
	return subsError{Error: code, Message: fmt.Sprintf("injected fault: HTTP %d", status)}
}
