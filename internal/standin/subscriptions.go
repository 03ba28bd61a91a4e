package standin

import (
	"crypto/subtle"
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
	status        string
	cancelledAt   time.Time
	cancellations int      // successful active→cancelled transitions
	cancelCalls   int      // every cancel request received
	keys          []string // Idempotency-Key of every cancel request that had one
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

// AddSubscription seeds an active subscription. Seeding an existing ID
// resets it to active with no recorded calls.
func (s *Subscriptions) AddSubscription(id, customerID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[id] = &subscription{customerID: customerID, status: SubscriptionActive}
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
// subscription, including rejected, conflicting and faulted ones.
func (s *Subscriptions) CancelCalls(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return sub.cancelCalls
	}
	return s.unknownCalls[id]
}

// IdempotencyKeys returns the Idempotency-Key header of every cancel request
// for the subscription that carried one, in arrival order. The service
// records the keys but does not deduplicate on them.
func (s *Subscriptions) IdempotencyKeys(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub, ok := s.subs[id]; ok {
		return slices.Clone(sub.keys)
	}
	return nil
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
	Status      string `json:"status"`
	CancelledAt string `json:"cancelled_at,omitempty"`
}

func (s *Subscriptions) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		writeSubsError(w, http.StatusNotFound, "not_found", fmt.Sprintf("subscription %q not found", id))
		return
	}
	if sub.status == SubscriptionCancelled {
		writeJSON(w, http.StatusConflict, subsError{
			Error:       "already_cancelled",
			Message:     fmt.Sprintf("subscription %q is already cancelled", id),
			CancelledAt: sub.cancelledAt.UTC().Format(time.RFC3339),
		})
		return
	}
	sub.status = SubscriptionCancelled
	sub.cancelledAt = time.Now()
	sub.cancellations++
	writeJSON(w, http.StatusOK, subscriptionJSON{
		ID:          id,
		Status:      SubscriptionCancelled,
		CancelledAt: sub.cancelledAt.UTC().Format(time.RFC3339),
	})
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
	out := subscriptionJSON{ID: id, CustomerID: sub.customerID, Status: sub.status}
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
