package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

// DraftStarted answers POST /tickets/{id}/drafts.
type DraftStarted struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Joined is true when a draft was already running and this request
	// joined it.
	Joined    bool   `json:"joined"`
	StatusURL string `json:"status_url"`
	EventsURL string `json:"events_url"`
}

type startDraftBody struct {
	Reason string `json:"reason,omitempty"`
}

// startDraft starts or joins the ticket's draft. The ticket must be
// mirrored (Zendesk's webhook told us about it): an unknown ticket is 404
// and starts nothing.
func (s *Server) startDraft(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketID(w, r)
	if !ok {
		return
	}
	var body startDraftBody
	if !s.decode(w, r, &body, true) {
		return
	}
	if len(body.Reason) > 64 {
		problem(w, http.StatusBadRequest, "invalid-reason", "Invalid reason", "reason must be at most 64 characters")
		return
	}
	if _, err := s.ingest.GetTicketMirror(r.Context(), id); err != nil {
		if errors.Is(err, supportflow.ErrNotFound) {
			problem(w, http.StatusNotFound, "unknown-ticket", "Unknown ticket", fmt.Sprintf("ticket %d is not known to supportflow (Zendesk's webhook has not reported it)", id))
			return
		}
		s.internal(w, r, err)
		return
	}
	d, err := s.starter.StartDraft(r.Context(), id, cmp.Or(body.Reason, "api"))
	if err != nil {
		s.internal(w, r, err)
		return
	}
	status := fmt.Sprintf("/tickets/%d/draft", id)
	w.Header().Set("Location", status)
	writeJSON(w, http.StatusAccepted, DraftStarted{WorkflowID: d.WorkflowID, RunID: d.RunID, Joined: d.Joined, StatusURL: status, EventsURL: status + "/events"})
}

func (s *Server) getDraft(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketID(w, r)
	if !ok {
		return
	}
	st, err := s.starter.DraftStatus(r.Context(), id)
	if err != nil {
		s.draftError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) draftError(w http.ResponseWriter, r *http.Request, id int64, err error) {
	if errors.Is(err, starter.ErrNoDraft) {
		problem(w, http.StatusNotFound, "no-draft", "No draft", fmt.Sprintf("ticket %d has no draft", id))
		return
	}
	s.internal(w, r, err)
}

// draftEvents streams the draft's state and progress as Server-Sent
// Events ("event: draft", data the DraftStatus JSON) whenever they change,
// and ends after the draft settles (a terminal state), so a browser never
// has to guess with a timeout.
//
// A token holds at most MaxStreamsPerToken streams open at once; the next
// is refused 429 with a Retry-After (a browser's EventSource gives up on a
// 429, so an app reconnects itself once a stream of its own ends). A
// stream is not cut by the server's timeouts: its read deadline is lifted
// (there is nothing left to read; net/http lifts it too once it reads the
// connection in the background, for a request without a body) and each
// write gets WriteTimeout of its own, so the stream lives as long as the
// draft needs while a client that stops reading is still cut off.
func (s *Server) draftEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketID(w, r)
	if !ok {
		return
	}
	release, ok := s.openStream(w, caller(r).name)
	if !ok {
		return
	}
	defer release()
	st, err := s.starter.DraftStatus(r.Context(), id)
	if err != nil {
		s.draftError(w, r, id, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.internal(w, r, errors.New("streaming unsupported by the response writer"))
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	// extend gives the next write its own deadline (or none, without a
	// WriteTimeout): the server's WriteTimeout runs from the request's
	// headers and would end the stream.
	// https://pkg.go.dev/net/http#ResponseController.SetWriteDeadline
	extend := func() {
		deadline := time.Time{}
		if s.cfg.WriteTimeout > 0 {
			deadline = time.Now().Add(s.cfg.WriteTimeout)
		}
		_ = rc.SetWriteDeadline(deadline)
	}
	extend()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	last := ""
	lastWrite := time.Now()
	end := time.NewTimer(s.cfg.MaxStream)
	defer end.Stop()
	wait := s.cfg.PollInterval
	for {
		if key := eventKey(st); key != last {
			extend()
			if err := writeEvent(w, "draft", st); err != nil {
				return
			}
			flusher.Flush()
			last, lastWrite = key, time.Now()
		}
		if supportflow.DraftTerminal(st.State) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-end.C:
			return // the browser reconnects
		case <-time.After(wait):
		}
		if time.Since(lastWrite) >= s.cfg.KeepAlive {
			extend()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			lastWrite = time.Now()
		}
		next, err := s.starter.DraftStatus(r.Context(), id)
		switch {
		case errors.Is(err, starter.ErrNoDraft):
			return
		case err != nil:
			// A transient read error: back off, up to 5 s.
			wait = min(2*wait, 5*time.Second)
			continue
		}
		st = next
		// Progress changes only while gathering or drafting; waiting for a
		// human is polled gently.
		wait = s.cfg.PollInterval
		if st.State != supportflow.DraftGathering && st.State != supportflow.DraftDrafting {
			wait = max(wait, 2*time.Second)
		}
	}
}

// openStream counts an SSE stream against the token's cap, answering 429
// with a Retry-After (and false) when the token holds as many as it may.
// release, called once the stream ends, frees its place.
func (s *Server) openStream(w http.ResponseWriter, token string) (release func(), ok bool) {
	s.streamsMu.Lock()
	open := s.streams[token]
	if open >= s.cfg.MaxStreamsPerToken {
		s.streamsMu.Unlock()
		s.log.Warn("event stream refused: the token holds as many as it may", "token", token, "open_streams", open)
		w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.StreamRetryAfter+time.Second-1)/time.Second)))
		problem(w, http.StatusTooManyRequests, "too-many-streams", "Too many open event streams",
			fmt.Sprintf("token %q holds %d event streams open, the most it may; close one, or retry after the Retry-After", token, open))
		return nil, false
	}
	s.streams[token] = open + 1
	s.streamsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.streamsMu.Lock()
			defer s.streamsMu.Unlock()
			if s.streams[token]--; s.streams[token] <= 0 {
				delete(s.streams, token)
			}
		})
	}, true
}

// eventKey is what makes a status worth sending again. It includes
// WorkerUnavailable: a worker that dies (or comes back) while the draft
// awaits approval changes nothing else.
func eventKey(st supportflow.DraftStatus) string {
	tokens, step := 0, ""
	if st.Progress != nil {
		tokens, step = st.Progress.Tokens, st.Progress.Step
	}
	proposal := ""
	if st.Proposal != nil {
		proposal = st.Proposal.ID
	}
	return fmt.Sprintf("%s|%s|%s|%d|%s|%d|%t", st.State, proposal, st.Error, tokens, step, st.Generation, st.WorkerUnavailable)
}

func writeEvent(w http.ResponseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}

// approveBody is an approval's optional body. The approval is recorded
// under the token's name; approved_by is the person in the calling app the
// token approved on behalf of, kept beside it.
type approveBody struct {
	ApprovedBy string `json:"approved_by,omitempty"`
}

// rejectBody is a rejection's optional body; rejected_by is, as for
// approveBody, on whose behalf the token rejected.
type rejectBody struct {
	RejectedBy string `json:"rejected_by,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Approved answers POST /proposals/{id}/approve: the execution, and each
// of its actions with the URL its ledger row (the outcome) is read at.
type Approved struct {
	supportflow.ApproveResult
	Actions []ActionLink `json:"actions"`
}

// ActionLink names an action: its key ({proposalId}:{index}) and its
// GET /actions/{key} URL.
type ActionLink struct {
	Key string `json:"key"`
	URL string `json:"url"`
}

// proposalActions are a proposal's actions. A drafted proposal has one,
// index 0: its cancellations, ticket update and reply are legs of it.
func proposalActions(proposalID string) []ActionLink {
	key := supportflow.ActionKey(proposalID, 0)
	return []ActionLink{{Key: key, URL: "/actions/" + key}}
}

// proposal reads the {id} proposal, answering 400 for a malformed ID and
// 404 for an unknown one.
func (s *Server) proposal(w http.ResponseWriter, r *http.Request) (supportflow.ProposalRecord, bool) {
	id := r.PathValue("id")
	if err := supportflow.ValidateProposalID(id); err != nil {
		problem(w, http.StatusBadRequest, "invalid-proposal-id", "Invalid proposal id", err.Error())
		return supportflow.ProposalRecord{}, false
	}
	p, err := s.proposals.GetProposal(r.Context(), id)
	if errors.Is(err, supportflow.ErrNotFound) {
		problem(w, http.StatusNotFound, "unknown-proposal", "Unknown proposal", fmt.Sprintf("proposal %s does not exist", id))
		return p, false
	}
	if err != nil {
		s.internal(w, r, err)
		return p, false
	}
	return p, true
}

// decisionError maps a refused approval or rejection: the proposal is not
// the ticket's current one awaiting approval (stale, expired, superseded,
// already decided), 409 with the reason.
func (s *Server) decisionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, starter.ErrStaleProposal) || errors.Is(err, starter.ErrNoDraft):
		problem(w, http.StatusConflict, "proposal-not-awaiting-approval", "Proposal not awaiting approval", err.Error())
	case errors.Is(err, supportflow.ErrConflict):
		problem(w, http.StatusConflict, "proposal-conflict", "Proposal approved with other content", err.Error())
	case errors.Is(err, starter.ErrAnswerConflict):
		// Another proposal answers the ticket: a retry of an older one is
		// executing, or one went out after this one was drafted.
		problem(w, http.StatusConflict, "ticket-answered-elsewhere", "Another proposal answers this ticket", err.Error())
	default:
		s.internal(w, r, err)
	}
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	var body approveBody
	if !s.decode(w, r, &body, true) {
		return
	}
	p, ok := s.proposal(w, r)
	if !ok {
		return
	}
	by := caller(r).name
	res, err := s.starter.Approve(r.Context(), p.TicketID, supportflow.ApproveRequest{ProposalID: p.ID, ApprovedBy: by, OnBehalfOf: text.Clip(body.ApprovedBy, 200)})
	if err != nil {
		s.decisionError(w, r, err)
		return
	}
	s.log.Info("proposal approved", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by, "already_approved", res.AlreadyApproved)
	writeJSON(w, http.StatusOK, Approved{ApproveResult: res, Actions: proposalActions(p.ID)})
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request) {
	var body rejectBody
	if !s.decode(w, r, &body, true) {
		return
	}
	if strings.TrimSpace(body.Reason) == ReplyMyselfReason {
		// Reserved: it marks a rejection made by reply-myself, whose reply
		// is handed out.
		problem(w, http.StatusBadRequest, "invalid-reason", "Invalid reason", fmt.Sprintf("the reason %q is reserved for POST /proposals/{id}/reply-myself", ReplyMyselfReason))
		return
	}
	p, ok := s.proposal(w, r)
	if !ok {
		return
	}
	by := caller(r).name
	err := s.starter.Reject(r.Context(), p.TicketID, supportflow.RejectRequest{ProposalID: p.ID, RejectedBy: by, OnBehalfOf: text.Clip(body.RejectedBy, 200), Reason: text.Clip(body.Reason, 2000)})
	if err != nil {
		s.decisionError(w, r, err)
		return
	}
	s.log.Info("proposal rejected", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by)
	writeJSON(w, http.StatusOK, map[string]string{"proposal_id": p.ID, "state": supportflow.DraftRejected})
}

// RetryStarted answers POST /proposals/{id}/retry.
type RetryStarted struct {
	ProposalID string `json:"proposal_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Joined is true when a retry (or the execution) was already running.
	Joined bool `json:"joined"`
	// ActionURL is where the action's ledger row shows the outcome.
	ActionURL string `json:"action_url"`
}

// retry runs an approved proposal whose execution failed again, with the
// same action keys: what landed (a cancellation, the private note) is
// skipped, the rest runs, the reply last. 202 with the execution; 404 for
// an unknown proposal; 409 when it was never approved, is still running,
// or has nothing left to do.
func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	p, ok := s.proposal(w, r)
	if !ok {
		return
	}
	by := caller(r).name
	e, err := s.starter.Retry(r.Context(), s.proposals, p.ID, by)
	if err != nil {
		if errors.Is(err, starter.ErrNotRetryable) || errors.Is(err, supportflow.ErrInvalidInput) {
			problem(w, http.StatusConflict, "nothing-to-retry", "Nothing to retry", err.Error())
			return
		}
		s.internal(w, r, err)
		return
	}
	s.log.Info("retrying a failed proposal", "proposal_id", p.ID, "token", by, "workflow_id", e.WorkflowID, "joined", e.Joined)
	writeJSON(w, http.StatusAccepted, RetryStarted{ProposalID: p.ID, WorkflowID: e.WorkflowID, RunID: e.RunID, Joined: e.Joined,
		ActionURL: "/actions/" + supportflow.ActionKey(p.ID, 0)})
}

// ActionView is GET /actions/{key}.
type ActionView struct {
	Key           string             `json:"key"`
	TicketID      int64              `json:"ticket_id"`
	State         string             `json:"state"`
	Error         string             `json:"error,omitempty"`
	Attempts      int                `json:"attempts"`
	CommentID     int64              `json:"comment_id,omitempty"`
	Cancellations []CancellationView `json:"cancellations"`
	// Legs are every leg of the action in the order they run.
	Legs      []LegView `json:"legs"`
	UpdatedAt time.Time `json:"updated_at"`
}

// LegView is one leg of an action: its kind (cancel_subscription,
// ticket_update, reply), target, state (pending, done, failed, unknown)
// and the receiver's ID of its effect.
type LegView struct {
	Kind       string `json:"kind"`
	Target     string `json:"target"`
	State      string `json:"state"`
	ExternalID string `json:"external_id,omitempty"`
	Error      string `json:"error,omitempty"`
}

// CancellationView is one subscription of an action.
type CancellationView struct {
	SubscriptionID string `json:"subscription_id"`
	State          string `json:"state"`
	Error          string `json:"error,omitempty"`
}

func (s *Server) getAction(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	a, err := s.ledger.Get(r.Context(), key)
	switch {
	case errors.Is(err, supportflow.ErrInvalidInput):
		problem(w, http.StatusBadRequest, "invalid-action-key", "Invalid action key", err.Error())
		return
	case errors.Is(err, supportflow.ErrNotFound):
		problem(w, http.StatusNotFound, "unknown-action", "Unknown action", fmt.Sprintf("action %s does not exist", key))
		return
	case err != nil:
		s.internal(w, r, err)
		return
	}
	v := ActionView{Key: a.Key, TicketID: a.TicketID, State: a.State, Error: a.LastError, Attempts: a.Attempts,
		CommentID: a.CommentID(), Cancellations: []CancellationView{}, Legs: []LegView{}, UpdatedAt: a.UpdatedAt}
	for _, l := range a.Legs {
		v.Legs = append(v.Legs, LegView{Kind: string(l.Kind), Target: l.Target, State: l.State, ExternalID: l.ExternalID, Error: l.LastError})
		if l.Kind == supportflow.LegCancelSubscription {
			// The cancellations keep the words they had before legs
			// were rows: a done cancellation is "cancelled".
			state := l.State
			if state == ledger.LegDone {
				state = "cancelled"
			}
			v.Cancellations = append(v.Cancellations, CancellationView{SubscriptionID: l.Target, State: state, Error: l.LastError})
		}
	}
	writeJSON(w, http.StatusOK, v)
}
