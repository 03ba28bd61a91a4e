package standin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// This file saves and restores the stand-ins' state, so that a local run
// stopped and started again finds the tickets, subscriptions and customers
// its kept drafts were written for. Faults, request logs, rate limits,
// webhook settings and BigQuery jobs are not state: they are set up again
// by whoever starts the stand-in.

// snapshotVersion is written in every snapshot; a snapshot of another
// version is refused rather than half read.
const snapshotVersion = 1

type zendeskSnapshot struct {
	Version      int               `json:"version"`
	Users        []User            `json:"users"`
	Tickets      []zTicketSnapshot `json:"tickets"`
	CCs          map[int64][]int64 `json:"ccs,omitempty"`
	NextTicketID int64             `json:"next_ticket_id"`
	NextID       int64             `json:"next_id"`
}

type zTicketSnapshot struct {
	Ticket    Ticket             `json:"ticket"`
	CreatedAt time.Time          `json:"created_at"`
	UpdatedAt time.Time          `json:"updated_at"`
	Comments  []zCommentSnapshot `json:"comments"`
	Audits    []auditSnapshot    `json:"audits"`
}

type zCommentSnapshot struct {
	Comment  Comment `json:"comment"`
	AuthorID int64   `json:"author_id"`
	HTMLBody string  `json:"html_body"`
	ViaAPI   bool    `json:"via_api"`
}

type auditSnapshot struct {
	Audit auditJSON `json:"audit"`
	At    time.Time `json:"at"`
}

// SaveState encodes everything the Zendesk stand-in holds: users, tickets
// with their comments and audits, CCs and the next IDs.
func (z *Zendesk) SaveState() ([]byte, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	s := zendeskSnapshot{Version: snapshotVersion, NextTicketID: z.nextTicketID, NextID: z.nextID}
	for _, id := range slices.Sorted(maps.Keys(z.users)) {
		s.Users = append(s.Users, z.users[id])
	}
	for _, id := range slices.Sorted(maps.Keys(z.tickets)) {
		zt := z.tickets[id]
		ts := zTicketSnapshot{Ticket: zt.Ticket, CreatedAt: zt.createdAt, UpdatedAt: zt.updatedAt}
		for _, c := range zt.comments {
			ts.Comments = append(ts.Comments, zCommentSnapshot{Comment: c.Comment, AuthorID: c.authorID, HTMLBody: c.htmlBody, ViaAPI: c.viaAPI})
		}
		for _, a := range zt.audits {
			ts.Audits = append(ts.Audits, auditSnapshot{Audit: a, At: a.at})
		}
		s.Tickets = append(s.Tickets, ts)
	}
	z.hooks.mu.Lock()
	if len(z.hooks.ccs) > 0 {
		s.CCs = make(map[int64][]int64, len(z.hooks.ccs))
		for id, users := range z.hooks.ccs {
			s.CCs[id] = slices.Clone(users)
		}
	}
	z.hooks.mu.Unlock()
	return json.Marshal(s)
}

// RestoreState replaces the stand-in's users, tickets and CCs with those
// SaveState encoded. Numbers inside audit events and comment metadata come
// back as json.Number, which encodes exactly as it was read.
func (z *Zendesk) RestoreState(data []byte) error {
	var s zendeskSnapshot
	if err := decodeSnapshot(data, &s); err != nil {
		return fmt.Errorf("standin: Zendesk state: %w", err)
	}
	if s.Version != snapshotVersion {
		return fmt.Errorf("standin: Zendesk state has version %d, want %d", s.Version, snapshotVersion)
	}
	users := make(map[int64]User, len(s.Users))
	for _, u := range s.Users {
		users[u.ID] = u
	}
	tickets := make(map[int64]*zTicket, len(s.Tickets))
	for _, ts := range s.Tickets {
		if ts.Ticket.ID <= 0 {
			return errors.New("standin: Zendesk state has a ticket without an ID")
		}
		zt := &zTicket{Ticket: ts.Ticket, createdAt: ts.CreatedAt, updatedAt: ts.UpdatedAt}
		for _, c := range ts.Comments {
			zt.comments = append(zt.comments, zComment{Comment: c.Comment, authorID: c.AuthorID, htmlBody: c.HTMLBody, viaAPI: c.ViaAPI})
		}
		for _, a := range ts.Audits {
			audit := a.Audit
			audit.at = a.At
			zt.audits = append(zt.audits, audit)
		}
		tickets[ts.Ticket.ID] = zt
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.users, z.tickets = users, tickets
	z.nextTicketID, z.nextID = max(s.NextTicketID, 1), max(s.NextID, 10000)
	z.hooks.mu.Lock()
	z.hooks.ccs = s.CCs
	z.hooks.mu.Unlock()
	return nil
}

// TicketIDs returns the IDs of every ticket the stand-in holds, in order.
func (z *Zendesk) TicketIDs() []int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Sorted(maps.Keys(z.tickets))
}

type subscriptionsSnapshot struct {
	Version       int                    `json:"version"`
	Subscriptions []subscriptionSnapshot `json:"subscriptions"`
}

type subscriptionSnapshot struct {
	ID            string                    `json:"id"`
	CustomerID    string                    `json:"customer_id"`
	Plan          string                    `json:"plan,omitempty"`
	Status        string                    `json:"status"`
	CancelledAt   time.Time                 `json:"cancelled_at"`
	Cancellations int                       `json:"cancellations"`
	CancelCalls   int                       `json:"cancel_calls"`
	Keys          []string                  `json:"keys,omitempty"`
	Answered      map[string]answerSnapshot `json:"answered,omitempty"`
	Replays       int                       `json:"replays"`
}

type answerSnapshot struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

// SaveState encodes every subscription with its status, counters and the
// answers it keeps for repeated Idempotency-Keys, so a cancellation retried
// after a restart is still answered as the first one was.
func (s *Subscriptions) SaveState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := subscriptionsSnapshot{Version: snapshotVersion}
	for _, id := range slices.Sorted(maps.Keys(s.subs)) {
		sub := s.subs[id]
		ss := subscriptionSnapshot{ID: id, CustomerID: sub.customerID, Plan: sub.plan, Status: sub.status, CancelledAt: sub.cancelledAt,
			Cancellations: sub.cancellations, CancelCalls: sub.cancelCalls, Keys: slices.Clone(sub.keys), Replays: sub.replays}
		if len(sub.answered) > 0 {
			ss.Answered = make(map[string]answerSnapshot, len(sub.answered))
			for k, a := range sub.answered {
				ss.Answered[k] = answerSnapshot{Status: a.status, Body: bytes.Clone(a.body)}
			}
		}
		out.Subscriptions = append(out.Subscriptions, ss)
	}
	return json.Marshal(out)
}

// RestoreState replaces every subscription with those SaveState encoded.
func (s *Subscriptions) RestoreState(data []byte) error {
	var in subscriptionsSnapshot
	if err := decodeSnapshot(data, &in); err != nil {
		return fmt.Errorf("standin: subscriptions state: %w", err)
	}
	if in.Version != snapshotVersion {
		return fmt.Errorf("standin: subscriptions state has version %d, want %d", in.Version, snapshotVersion)
	}
	subs := make(map[string]*subscription, len(in.Subscriptions))
	for _, ss := range in.Subscriptions {
		sub := &subscription{customerID: ss.CustomerID, plan: ss.Plan, status: ss.Status, cancelledAt: ss.CancelledAt,
			cancellations: ss.Cancellations, cancelCalls: ss.CancelCalls, keys: ss.Keys, replays: ss.Replays, answered: map[string]storedAnswer{}}
		for k, a := range ss.Answered {
			sub.answered[k] = storedAnswer{status: a.Status, body: a.Body}
		}
		subs[ss.ID] = sub
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = subs
	s.unknownCalls = make(map[string]int)
	return nil
}

type bigQuerySnapshot struct {
	Version   int                  `json:"version"`
	Customers map[int64]BQCustomer `json:"customers"`
}

// SaveState encodes the seeded customers (jobs are not kept: a lookup
// retried after a restart runs a new one).
func (b *BigQuery) SaveState() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return json.Marshal(bigQuerySnapshot{Version: snapshotVersion, Customers: b.customers})
}

// RestoreState replaces the seeded customers with those SaveState encoded.
func (b *BigQuery) RestoreState(data []byte) error {
	var in bigQuerySnapshot
	if err := decodeSnapshot(data, &in); err != nil {
		return fmt.Errorf("standin: BigQuery state: %w", err)
	}
	if in.Version != snapshotVersion {
		return fmt.Errorf("standin: BigQuery state has version %d, want %d", in.Version, snapshotVersion)
	}
	if in.Customers == nil {
		in.Customers = map[int64]BQCustomer{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.customers = in.Customers
	return nil
}

// decodeSnapshot decodes one JSON value into v, keeping numbers inside
// free-form values as json.Number, and refuses trailing data.
func decodeSnapshot(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the state")
	}
	return nil
}
