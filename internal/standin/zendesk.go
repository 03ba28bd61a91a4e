package standin

import (
	"cmp"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ZendeskAgentID is the user ID of the API user the stand-in authenticates;
// it is the author of every comment and audit posted through the API.
const ZendeskAgentID int64 = 900000000001

// DefaultRequesterID is the requester of tickets seeded without one, since
// every real Zendesk ticket has one.
const DefaultRequesterID int64 = 900000000100

const defaultRequesterID = DefaultRequesterID

// Zendesk user roles (https://developer.zendesk.com/api-reference/ticketing/users/users/,
// the "role" property).
const (
	RoleEndUser = "end-user"
	RoleAgent   = "agent"
	RoleAdmin   = "admin"
)

// User is a Zendesk user to seed with Zendesk.AddUser: a CC'd end user, a
// human agent. The requesters of seeded tickets and the API user
// (ZendeskAgentID, an agent) need no seeding.
type User struct {
	ID   int64
	Name string
	// Role is RoleEndUser, RoleAgent or RoleAdmin; "" means RoleEndUser.
	Role string
}

// MaxCommentBytes is the longest comment body the stand-in accepts, matching
// Zendesk's 64 KiB limit.
const MaxCommentBytes = 65536

// maxZendeskRequestBody bounds a request body; real Zendesk rejects far
// smaller payloads, this only protects the stand-in.
const maxZendeskRequestBody = 8 << 20

// zendeskStatuses are the ticket statuses Zendesk accepts on update.
var zendeskStatuses = []string{"new", "open", "pending", "hold", "solved", "closed"}

// Ticket is a ticket to seed with Zendesk.AddTicket.
type Ticket struct {
	// ID is the ticket ID; 0 picks the next free ID.
	ID          int64
	Subject     string
	Description string
	// RequesterID defaults to a fixed end-user ID when 0.
	RequesterID int64
	// RequesterName is the requester's name, sideloaded with comments;
	// defaults to "Customer {RequesterID}".
	RequesterName string
	// Status defaults to "new".
	Status string
	Tags   []string
}

// Comment is a comment posted through the API (PUT /api/v2/tickets/{id}.json).
type Comment struct {
	ID      int64
	AuditID int64
	Body    string
	Public  bool
	// Metadata is the request's ticket.metadata object, which Zendesk keeps
	// as the audit's metadata.custom; nil when the request had none.
	Metadata map[string]any
	At       time.Time
}

// zTicket is the stand-in's state for one ticket.
type zTicket struct {
	Ticket
	createdAt time.Time
	updatedAt time.Time
	// comments holds every comment in creation order, the description first.
	comments []zComment
	// audits holds every audit in creation order, the creation audit first.
	audits []auditJSON
}

// zComment is a stored comment with the fields only the wire format needs.
type zComment struct {
	Comment
	authorID int64
	htmlBody string
	viaAPI   bool // posted through PUT rather than seeded
}

// Zendesk is an http.Handler that stands in for the Zendesk Support API v2
// (see the package doc). It is safe for concurrent use.
type Zendesk struct {
	email    string
	apiToken string

	faults Faults
	log    requestLog
	meter  meter
	mux    *http.ServeMux

	hooks webhooks
	exp   exports

	mu           sync.Mutex
	users        map[int64]User
	tickets      map[int64]*zTicket
	nextTicketID int64
	nextID       int64 // shared by audits, events and comments
	conflicts    int   // safe updates refused with 409
}

// Conflicts returns how many safe updates were refused with 409.
func (z *Zendesk) Conflicts() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.conflicts
}

// NewZendesk returns a stand-in that accepts go-zendesk's API-token
// credential for email and apiToken, that is Basic auth with the user name
// "{email}/token" and the password apiToken.
func NewZendesk(email, apiToken string) *Zendesk {
	z := &Zendesk{
		email:        email,
		apiToken:     apiToken,
		users:        make(map[int64]User),
		tickets:      make(map[int64]*zTicket),
		nextTicketID: 1,
		nextID:       10000,
	}
	mux := http.NewServeMux()
	// ServeMux wildcards must span a whole segment, so "{id}.json" is
	// matched as one segment and split by ticketIDFromSegment.
	mux.HandleFunc("GET /api/v2/tickets/{file}", z.showTicket)
	mux.HandleFunc("PUT /api/v2/tickets/{file}", z.updateTicket)
	mux.HandleFunc("GET /api/v2/tickets/{id}/comments.json", z.listComments)
	mux.HandleFunc("GET /api/v2/tickets/{id}/audits.json", z.listAudits)
	mux.HandleFunc("GET /api/v2/incremental/tickets/cursor.json", z.incrementalTickets)
	mux.HandleFunc("GET /api/v2/incremental/tickets/cursor", z.incrementalTickets)
	mux.HandleFunc("GET /api/v2/incremental/ticket_events.json", z.incrementalTicketEvents)
	mux.HandleFunc("GET /api/v2/incremental/ticket_events", z.incrementalTicketEvents)
	mux.HandleFunc("GET /api/v2/users/me.json", z.me)
	mux.HandleFunc("GET /api/v2/users/me", z.me)
	mux.HandleFunc("GET /api/v2/users/show_many.json", z.showManyUsers)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, zendeskError{Error: "InvalidEndpoint", Description: "Not found"})
	})
	z.mux = mux
	return z
}

// Inject adds a fault; see Fault.
func (z *Zendesk) Inject(f Fault) { z.faults.Inject(f) }

// ClearFaults removes every injected fault.
func (z *Zendesk) ClearFaults() { z.faults.Clear() }

// Requests returns how many requests with the method ("" for any) and a path
// starting with pathPrefix were received, including failed and faulted ones.
func (z *Zendesk) Requests(method, pathPrefix string) int {
	return z.log.count(method, pathPrefix)
}

// ServeHTTP implements http.Handler.
func (z *Zendesk) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	z.log.add(r)
	z.meter.serve(w, r, func(w http.ResponseWriter) {
		writeJSON(w, http.StatusTooManyRequests, zendeskError{Error: "APIRateLimitExceeded",
			Description: "Number of allowed API requests per minute exceeded"})
	}, func() {
		f := z.faults.match(r)
		serveWithFault(w, r, f, zendeskFaultBody, http.HandlerFunc(z.serveAuthenticated))
	})
}

// SetRateLimit makes the stand-in answer 429 with Retry-After, as Zendesk
// does, to requests over limit in any window (a minute when 0), and resets
// Load; limit 0 only measures.
func (z *Zendesk) SetRateLimit(limit int, window time.Duration) { z.meter.setLimit(limit, window) }

// Load is the pace the API was called at (every endpoint, webhooks aside).
func (z *Zendesk) Load() Load { return z.meter.get() }

// serveAuthenticated routes r if it carries the API-token credential.
func (z *Zendesk) serveAuthenticated(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	// Compare both parts in constant time so the stand-in never becomes a
	// model for a timing-leaky check.
	userOK := subtle.ConstantTimeCompare([]byte(user), []byte(z.email+"/token")) == 1
	passOK := subtle.ConstantTimeCompare([]byte(pass), []byte(z.apiToken)) == 1
	if !ok || !userOK || !passOK {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Couldn't authenticate you"})
		return
	}
	z.mux.ServeHTTP(w, r)
}

// AddTicket seeds a ticket and returns its ID. Creating the ticket records
// its description as the first comment and a creation audit, as Zendesk
// does. It panics if a ticket with t.ID already exists, since that is a bug
// in the seed.
func (z *Zendesk) AddTicket(t Ticket) int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	if t.ID == 0 {
		for z.tickets[z.nextTicketID] != nil {
			z.nextTicketID++
		}
		t.ID = z.nextTicketID
	}
	if _, dup := z.tickets[t.ID]; dup {
		panic(fmt.Sprintf("standin: Zendesk ticket %d already exists", t.ID))
	}
	if t.ID >= z.nextTicketID {
		z.nextTicketID = t.ID + 1
	}
	if t.RequesterID == 0 {
		t.RequesterID = defaultRequesterID
	}
	if t.Status == "" {
		t.Status = "new"
	}
	if t.RequesterName == "" {
		t.RequesterName = fmt.Sprintf("Customer %d", t.RequesterID)
	}
	t.Tags = slices.Clone(t.Tags)

	now := time.Now()
	zt := &zTicket{Ticket: t, createdAt: now, updatedAt: now}
	auditID := z.newID()
	desc := zComment{
		Comment:  Comment{ID: z.newID(), AuditID: auditID, Body: t.Description, Public: true, At: now},
		authorID: t.RequesterID,
		htmlBody: textToHTML(t.Description),
	}
	zt.comments = append(zt.comments, desc)
	events := []any{commentEvent(desc)}
	for _, field := range []struct {
		name  string
		value any
	}{
		{"subject", t.Subject},
		{"status", t.Status},
		{"requester_id", t.RequesterID},
		{"tags", nonNil(t.Tags)},
	} {
		events = append(events, map[string]any{
			"id": z.newID(), "type": "Create", "field_name": field.name, "value": field.value,
		})
	}
	zt.audits = append(zt.audits, auditJSON{
		ID:        auditID,
		TicketID:  t.ID,
		CreatedAt: zendeskTime(now),
		AuthorID:  t.RequesterID,
		Metadata:  newAuditMetadata(nil),
		Via:       newVia("web"),
		Events:    events,
		at:        now,
	})
	z.tickets[t.ID] = zt
	z.emit(zt, t.RequesterID, auditID, []change{{typ: "created", event: map[string]any{}}})
	return t.ID
}

// AddUser seeds a user (or replaces one with the same ID), for comments
// by someone other than the requester or the API user (SeedComment's
// AuthorID). The list-comments sideload reports its name and role.
func (z *Zendesk) AddUser(u User) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if u.Role == "" {
		u.Role = RoleEndUser
	}
	z.users[u.ID] = u
}

// userLocked is what the stand-in knows of a user on zt's ticket: its
// requester, the API user, a seeded user, else an end user it made up
// (every comment author is some user). z.mu must be held.
func (z *Zendesk) userLocked(zt *zTicket, id int64) User {
	if u, ok := z.users[id]; ok {
		return u
	}
	switch id {
	case zt.RequesterID:
		return User{ID: id, Name: zt.RequesterName, Role: RoleEndUser}
	case ZendeskAgentID:
		return User{ID: id, Name: "Support Agent", Role: RoleAgent}
	}
	return User{ID: id, Name: fmt.Sprintf("User %d", id), Role: RoleEndUser}
}

// SeedComment is a comment written outside the API: the customer writing
// again, or an agent's reply typed in Zendesk's own UI.
type SeedComment struct {
	Body string
	// Agent is true for an agent's reply (by the API user,
	// ZendeskAgentID), false for the requester's.
	Agent bool
	// AuthorID, when set, is the comment's author instead: a user seeded
	// with AddUser (a CC'd end user, a human agent). It overrides Agent.
	AuthorID int64
	// Private makes an agent's internal note.
	Private bool
	// At defaults to now.
	At time.Time
}

// AddComment appends a seeded comment (and its audit) to a ticket and
// returns the comment's ID. Seeded comments are not counted by Comments,
// CommentCount or TotalComments, which count what supportflow posted. It
// panics on an unknown ticket, since that is a bug in the seed.
func (z *Zendesk) AddComment(ticketID int64, c SeedComment) int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		panic(fmt.Sprintf("standin: Zendesk ticket %d does not exist", ticketID))
	}
	at := c.At
	if at.IsZero() {
		at = time.Now()
	}
	author := zt.RequesterID
	if c.Agent {
		author = ZendeskAgentID
	}
	if c.AuthorID != 0 {
		author = c.AuthorID
	}
	staff := z.userLocked(zt, author).Role != RoleEndUser
	auditID := z.newID()
	zc := zComment{
		Comment:  Comment{ID: z.newID(), AuditID: auditID, Body: c.Body, Public: !c.Private, At: at},
		authorID: author,
		htmlBody: textToHTML(c.Body),
	}
	zt.comments = append(zt.comments, zc)
	if at.After(zt.updatedAt) {
		zt.updatedAt = at
	}
	changes := []change{{typ: "comment_added", event: commentAddedEvent(zc, staff)}}
	events := []any{commentEvent(zc)}
	if !staff && (zt.Status == "pending" || zt.Status == "solved") {
		// A customer reply reopens the ticket, as in Zendesk.
		events = append(events, changeEvent(z.newID(), "status", "open", zt.Status))
		changes = append(changes, change{typ: "status_changed", event: map[string]any{"previous": strings.ToUpper(zt.Status), "current": "OPEN"}})
		zt.Status = "open"
	}
	zt.audits = append(zt.audits, auditJSON{
		ID:        auditID,
		TicketID:  ticketID,
		CreatedAt: zendeskTime(at),
		AuthorID:  author,
		Metadata:  newAuditMetadata(nil),
		Via:       newVia("web"),
		Events:    events,
		at:        at,
	})
	z.emit(zt, author, auditID, changes)
	return zc.ID
}

// Ticket returns the current state of a ticket.
func (z *Zendesk) Ticket(id int64) (Ticket, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		return Ticket{}, false
	}
	t := zt.Ticket
	t.Tags = slices.Clone(t.Tags)
	return t, true
}

// Comments returns the comments posted through the API on a ticket, oldest
// first. Seeded descriptions are not included.
func (z *Zendesk) Comments(ticketID int64) []Comment {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		return nil
	}
	var out []Comment
	for _, c := range zt.comments {
		if c.viaAPI {
			cc := c.Comment
			if cc.Metadata != nil {
				cc.Metadata = deepCopyJSON(cc.Metadata).(map[string]any)
			}
			out = append(out, cc)
		}
	}
	return out
}

// CommentCount returns how many comments were posted through the API on a
// ticket.
func (z *Zendesk) CommentCount(ticketID int64) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if zt, ok := z.tickets[ticketID]; ok {
		return countPosted(zt)
	}
	return 0
}

// TotalComments returns how many comments were posted through the API on
// all tickets.
func (z *Zendesk) TotalComments() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := 0
	for _, zt := range z.tickets {
		n += countPosted(zt)
	}
	return n
}

func countPosted(zt *zTicket) int {
	n := 0
	for _, c := range zt.comments {
		if c.viaAPI {
			n++
		}
	}
	return n
}

// newID returns the next audit, event or comment ID. z.mu must be held.
func (z *Zendesk) newID() int64 {
	z.nextID++
	return z.nextID
}

// --- handlers ---

func (z *Zendesk) showTicket(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketIDFromSegment(w, r.PathValue("file"))
	if !ok {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		writeRecordNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ticket": newTicketJSON(r, zt)})
}

// updateRequest is the subset of an update-ticket body the stand-in reads.
type updateRequest struct {
	Ticket *struct {
		Comment *struct {
			Body     string `json:"body"`
			HTMLBody string `json:"html_body"`
			Public   *bool  `json:"public"`
		} `json:"comment"`
		Metadata json.RawMessage `json:"metadata"`
		Status   *string         `json:"status"`
		Tags     *[]string       `json:"tags"`
		// SafeUpdate, when present with any value, and UpdatedStamp make the
		// update conditional on the ticket's updated_at.
		SafeUpdate   json.RawMessage `json:"safe_update"`
		UpdatedStamp *string         `json:"updated_stamp"`
	} `json:"ticket"`
}

func (z *Zendesk) updateTicket(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketIDFromSegment(w, r.PathValue("file"))
	if !ok {
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxZendeskRequestBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, zendeskError{Error: "RequestTooLarge", Description: "Request body is too large"})
			return
		}
		writeBadRequest(w, "Could not read the request body")
		return
	}
	var req updateRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeBadRequest(w, "Invalid JSON: "+err.Error())
		return
	}
	if req.Ticket == nil {
		writeBadRequest(w, "Missing ticket object")
		return
	}
	var custom map[string]any
	if len(req.Ticket.Metadata) > 0 && string(req.Ticket.Metadata) != "null" {
		if err := json.Unmarshal(req.Ticket.Metadata, &custom); err != nil || custom == nil {
			writeBadRequest(w, "ticket.metadata must be a JSON object")
			return
		}
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		writeRecordNotFound(w)
		return
	}

	// A safe update applies only if the ticket has not changed since the
	// caller read updated_stamp ("A value of false has the same effect as
	// true"); checked when the update is applied, so a write held up in
	// flight is refused if the ticket moved on meanwhile.
	// https://developer.zendesk.com/documentation/ticketing/managing-tickets/creating-and-updating-tickets/#protecting-against-ticket-update-collisions
	if len(req.Ticket.SafeUpdate) > 0 && req.Ticket.UpdatedStamp != nil {
		stamp, err := time.Parse(time.RFC3339, *req.Ticket.UpdatedStamp)
		if err != nil {
			writeBadRequest(w, "updated_stamp must be an ISO 8601 time")
			return
		}
		if !stamp.Equal(zt.updatedAt.Truncate(time.Second)) {
			z.conflicts++
			writeJSON(w, http.StatusConflict, zendeskError{Error: "UpdateConflict",
				Description: "The ticket was updated since updated_stamp; fetch it and try again"})
			return
		}
	}

	// Validate everything before changing anything: Zendesk applies an
	// update whole or not at all.
	var text, htmlBody string
	if c := req.Ticket.Comment; c != nil {
		text, htmlBody = c.Body, c.HTMLBody
		if strings.TrimSpace(text) == "" {
			text = htmlToText(htmlBody)
		}
		if strings.TrimSpace(text) == "" {
			writeRecordInvalid(w, "base", "Comment body can't be blank")
			return
		}
		// The limit is on what the caller sent, not on our HTML rendering.
		if len(text) > MaxCommentBytes || len(htmlBody) > MaxCommentBytes {
			writeRecordInvalid(w, "base", fmt.Sprintf("Comment body is too long (maximum is %d characters)", MaxCommentBytes))
			return
		}
		if htmlBody == "" {
			htmlBody = textToHTML(text)
		}
	}
	if s := req.Ticket.Status; s != nil && !slices.Contains(zendeskStatuses, *s) {
		writeRecordInvalid(w, "status", "Status: "+*s+" is not valid")
		return
	}

	now := time.Now()
	auditID := z.newID()
	var events []any
	var changes []change
	if c := req.Ticket.Comment; c != nil {
		public := true // Zendesk's default for an agent's API comment
		if c.Public != nil {
			public = *c.Public
		}
		zc := zComment{
			Comment: Comment{
				ID: z.newID(), AuditID: auditID, Body: text, Public: public,
				Metadata: custom, At: now,
			},
			authorID: ZendeskAgentID,
			htmlBody: htmlBody,
			viaAPI:   true,
		}
		zt.comments = append(zt.comments, zc)
		events = append(events, commentEvent(zc))
		changes = append(changes, change{typ: "comment_added", event: commentAddedEvent(zc, true)})
	}
	if s := req.Ticket.Status; s != nil && *s != zt.Status {
		events = append(events, changeEvent(z.newID(), "status", *s, zt.Status))
		changes = append(changes, change{typ: "status_changed", event: map[string]any{"previous": strings.ToUpper(zt.Status), "current": strings.ToUpper(*s)}})
		zt.Status = *s
	}
	if tags := req.Ticket.Tags; tags != nil && !slices.Equal(*tags, zt.Tags) {
		added, removed := []string{}, []string{}
		for _, t := range *tags {
			if !slices.Contains(zt.Tags, t) {
				added = append(added, t)
			}
		}
		for _, t := range zt.Tags {
			if !slices.Contains(*tags, t) {
				removed = append(removed, t)
			}
		}
		events = append(events, changeEvent(z.newID(), "tags", nonNil(slices.Clone(*tags)), nonNil(zt.Tags)))
		changes = append(changes, change{typ: "tags_changed", event: map[string]any{"tags_added": added, "tags_removed": removed}})
		zt.Tags = slices.Clone(*tags)
	}
	resp := map[string]any{}
	if len(events) > 0 {
		zt.updatedAt = now
		audit := auditJSON{
			ID:        auditID,
			TicketID:  id,
			CreatedAt: zendeskTime(now),
			AuthorID:  ZendeskAgentID,
			Metadata:  newAuditMetadata(custom),
			Via:       newVia("api"),
			Events:    events,
			at:        now,
		}
		zt.audits = append(zt.audits, audit)
		resp["audit"] = audit
		z.emit(zt, ZendeskAgentID, auditID, changes)
	}
	resp["ticket"] = newTicketJSON(r, zt)
	writeJSON(w, http.StatusOK, resp)
}

func (z *Zendesk) listComments(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketIDFromSegment(w, r.PathValue("id"))
	if !ok {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		writeRecordNotFound(w)
		return
	}
	// All comments come on one page: supportflow's tickets are short, and
	// next_page: null (offset pagination) or meta.has_more: false (cursor
	// pagination) tells any client that there is nothing more.
	comments := make([]commentJSON, 0, len(zt.comments))
	for _, c := range zt.comments {
		comments = append(comments, newCommentJSON(c))
	}
	resp := map[string]any{
		"comments":      comments,
		"next_page":     nil,
		"previous_page": nil,
		"count":         len(comments),
		"meta":          map[string]any{"has_more": false, "after_cursor": nil, "before_cursor": nil},
	}
	// Side-loading users adds every user the page refers to, each with
	// its role (https://developer.zendesk.com/documentation/ticketing/using-the-zendesk-api/side_loading/,
	// https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_comments/#list-comments):
	// the requester, the API user, and each comment's author.
	if strings.Contains(r.URL.Query().Get("include"), "users") {
		ids := []int64{zt.RequesterID, ZendeskAgentID}
		for _, c := range zt.comments {
			if !slices.Contains(ids, c.authorID) {
				ids = append(ids, c.authorID)
			}
		}
		users := make([]map[string]any, 0, len(ids))
		for _, id := range ids {
			u := z.userLocked(zt, id)
			users = append(users, map[string]any{"id": u.ID, "name": u.Name, "role": u.Role})
		}
		resp["users"] = users
	}
	writeJSON(w, http.StatusOK, resp)
}

// maxPerPage is Zendesk's limit (and default) for offset pagination.
const maxPerPage = 100

// listAudits serves List Audits for a Ticket as Zendesk documents it
// (https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/#list-audits-for-a-ticket):
// cursor pagination when the request has page[size] (or a cursor,
// page[after] or page[before]), offset pagination (page, per_page)
// otherwise, at most 100 audits a page either way. The two kinds are
// mutually exclusive ("use one format or the other, not both"), so a
// request with page and page[...] is refused. filter_events, include and
// include_item_cursors are ignored.
// https://developer.zendesk.com/api-reference/introduction/pagination/
func (z *Zendesk) listAudits(w http.ResponseWriter, r *http.Request) {
	id, ok := ticketIDFromSegment(w, r.PathValue("id"))
	if !ok {
		return
	}
	q := r.URL.Query()
	cursor := q.Has("page[size]") || q.Has("page[after]") || q.Has("page[before]")
	if cursor && q.Has("page") {
		writeBadRequest(w, "page and page[size], page[after] or page[before] are mutually exclusive: use offset or cursor pagination, not both")
		return
	}
	if cursor {
		z.listAuditsByCursor(w, r, id)
		return
	}
	perPage := maxPerPage
	if n, err := strconv.Atoi(q.Get("per_page")); err == nil && n > 0 && n < maxPerPage {
		perPage = n
	}
	page := 1
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 1 {
		page = n
	}
	// Offset pagination sorts with sort_order (asc, the default, or desc);
	// sort is cursor pagination's. include_boundary_indicators is only
	// valid with cursor pagination and is ignored here.
	// https://developer.zendesk.com/documentation/api-basics/pagination/comparing-cursor-pagination-and-offset-pagination/
	var desc bool
	switch q.Get("sort_order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		writeBadRequest(w, `sort_order must be "asc" or "desc"`)
		return
	}
	// Offset pagination stops at 10,000 records; past that Zendesk answers
	// 400 and asks for cursor pagination.
	// https://developer.zendesk.com/api-reference/introduction/pagination/
	if (page-1)*perPage >= 10000 {
		writeBadRequest(w, "Offset pagination is limited to 10000 records; use cursor pagination")
		return
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		writeRecordNotFound(w)
		return
	}
	audits := sortedAudits(zt.audits, desc)
	total := len(audits)
	start := min((page-1)*perPage, total)
	end := min(start+perPage, total)
	var next, prev any
	if end < total {
		next = pageURL(r, page+1, perPage)
	}
	if page > 1 {
		prev = pageURL(r, page-1, perPage)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"audits":        audits[start:end],
		"next_page":     next,
		"previous_page": prev,
		"count":         total,
	})
}

// listAuditsByCursor serves cursor pagination: page[size] audits (at most
// 100) after page[after] or before page[before] (not both), in the order
// of sort ("created_at", the default, or "-created_at" for newest first:
// with cursor pagination sort alone orders the records, so sort_order,
// offset pagination's parameter, is ignored). meta carries the page's
// after_cursor and before_cursor, and links the next and prev URLs;
// meta.has_more is there only when include_boundary_indicators is true,
// as the List Audits for a Ticket parameters say.
// https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/#list-audits-for-a-ticket
// https://developer.zendesk.com/api-reference/introduction/pagination/
// https://developer.zendesk.com/documentation/api-basics/pagination/comparing-cursor-pagination-and-offset-pagination/
func (z *Zendesk) listAuditsByCursor(w http.ResponseWriter, r *http.Request, id int64) {
	q := r.URL.Query()
	after, before := q.Get("page[after]"), q.Get("page[before]")
	if after != "" && before != "" {
		writeBadRequest(w, "page[before] and page[after] can't be used together in the same request")
		return
	}
	size := maxPerPage
	if n, err := strconv.Atoi(q.Get("page[size]")); err == nil && n > 0 && n < maxPerPage {
		size = n
	}
	order := q.Get("sort")
	switch order {
	case "":
		order = "created_at"
	case "created_at", "-created_at":
	default:
		// Zendesk sorts by other fields too; the stand-in's audits have
		// only this order, and a silent other one would mislead a test.
		writeBadRequest(w, `the stand-in sorts audits by created_at only: sort=created_at or sort=-created_at`)
		return
	}
	boundary, _ := strconv.ParseBool(q.Get("include_boundary_indicators"))

	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[id]
	if !ok {
		writeRecordNotFound(w)
		return
	}
	audits := sortedAudits(zt.audits, order == "-created_at")
	start, end := 0, min(size, len(audits))
	switch {
	case after != "":
		i, ok := auditCursorIndex(audits, order, after)
		if !ok {
			writeBadRequest(w, "Invalid cursor")
			return
		}
		start = i + 1
		end = min(start+size, len(audits))
	case before != "":
		i, ok := auditCursorIndex(audits, order, before)
		if !ok {
			writeBadRequest(w, "Invalid cursor")
			return
		}
		start, end = max(0, i-size), i
	}
	page := audits[start:end]
	meta := map[string]any{"after_cursor": nil, "before_cursor": nil}
	links := map[string]any{"next": nil, "prev": nil}
	if len(page) > 0 {
		ac, bc := auditCursor(order, page[len(page)-1].ID), auditCursor(order, page[0].ID)
		meta["after_cursor"], meta["before_cursor"] = ac, bc
		links["next"], links["prev"] = cursorURL(r, "page[after]", ac), cursorURL(r, "page[before]", bc)
	}
	if boundary {
		// has_more looks the way the page was read: forward after
		// page[after] (or from the start), backward before page[before].
		meta["has_more"] = end < len(audits)
		if before != "" {
			meta["has_more"] = start > 0
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"audits": page, "meta": meta, "links": links})
}

// sortedAudits returns the audits by created_at as Zendesk shows it (whole
// seconds), then by ID; newest first when desc.
func sortedAudits(audits []auditJSON, desc bool) []auditJSON {
	out := slices.Clone(audits)
	slices.SortStableFunc(out, func(a, b auditJSON) int {
		if c := cmp.Compare(a.at.Unix(), b.at.Unix()); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if desc {
		slices.Reverse(out)
	}
	return out
}

// auditCursor is the opaque cursor of the audit id in the order: a cursor
// names a record, not an offset, so audits added between two pages neither
// repeat nor hide one.
func auditCursor(order string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(order + ":" + strconv.FormatInt(id, 10)))
}

// auditCursorIndex finds the audit a cursor names in audits, sorted in
// order; false when the cursor is not one of this listing's.
func auditCursorIndex(audits []auditJSON, order, cursor string) (int, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, false
	}
	o, idText, ok := strings.Cut(string(raw), ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || o != order {
		return 0, false
	}
	i := slices.IndexFunc(audits, func(a auditJSON) bool { return a.ID == id })
	return i, i >= 0
}

// cursorURL is the absolute URL of the current cursor listing with its
// cursor replaced by key=cursor, as Zendesk puts in links.next and
// links.prev.
func cursorURL(r *http.Request, key, cursor string) string {
	q := r.URL.Query()
	q.Del("page[after]")
	q.Del("page[before]")
	q.Set(key, cursor)
	u := url.URL{Scheme: requestScheme(r), Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
	return u.String()
}

// pageURL is the absolute URL of another page of the current listing, as
// Zendesk puts in next_page and previous_page.
func pageURL(r *http.Request, page, perPage int) string {
	u := url.URL{
		Scheme:   requestScheme(r),
		Host:     r.Host,
		Path:     r.URL.Path,
		RawQuery: url.Values{"page": {strconv.Itoa(page)}, "per_page": {strconv.Itoa(perPage)}}.Encode(),
	}
	return u.String()
}

func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// ticketIDFromSegment parses "123" or "123.json", answering 400 when it is
// not a positive integer.
func ticketIDFromSegment(w http.ResponseWriter, seg string) (int64, bool) {
	s := strings.TrimSuffix(seg, ".json")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		writeBadRequest(w, fmt.Sprintf("Invalid ticket id: %q", s))
		return 0, false
	}
	return id, true
}

// --- wire format ---

// zendeskError is Zendesk's usual error body.
type zendeskError struct {
	Error       string `json:"error"`
	Description string `json:"description,omitempty"`
	Details     any    `json:"details,omitempty"`
}

func writeRecordNotFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, zendeskError{Error: "RecordNotFound", Description: "Not found"})
}

func writeBadRequest(w http.ResponseWriter, description string) {
	writeJSON(w, http.StatusBadRequest, zendeskError{Error: "BadRequest", Description: description})
}

func writeRecordInvalid(w http.ResponseWriter, field, description string) {
	writeJSON(w, http.StatusUnprocessableEntity, zendeskError{
		Error:       "RecordInvalid",
		Description: "Record validation errors",
		Details:     map[string]any{field: []map[string]string{{"description": description}}},
	})
}

// zendeskFaultBody is the error body of an injected status.
func zendeskFaultBody(status int) any {
	switch status {
	case http.StatusTooManyRequests:
		return zendeskError{Error: "APIRateLimitExceeded", Description: "Number of allowed API requests per minute exceeded"}
	case http.StatusInternalServerError:
		return zendeskError{Error: "InternalServerError", Description: "Something went wrong"}
	case http.StatusServiceUnavailable:
		return zendeskError{Error: "ServiceUnavailable", Description: "Zendesk is temporarily unavailable"}
	default:
		return zendeskError{Error: strings.ReplaceAll(http.StatusText(status), " ", ""), Description: http.StatusText(status)}
	}
}

type ticketJSON struct {
	URL         string   `json:"url"`
	ID          int64    `json:"id"`
	Subject     string   `json:"subject"`
	RawSubject  string   `json:"raw_subject"`
	Description string   `json:"description"`
	Status      string   `json:"status"`
	RequesterID int64    `json:"requester_id"`
	SubmitterID int64    `json:"submitter_id"`
	Tags        []string `json:"tags"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
}

func newTicketJSON(r *http.Request, zt *zTicket) ticketJSON {
	return ticketJSON{
		URL:         fmt.Sprintf("%s://%s/api/v2/tickets/%d.json", requestScheme(r), r.Host, zt.ID),
		ID:          zt.ID,
		Subject:     zt.Subject,
		RawSubject:  zt.Subject,
		Description: zt.Description,
		Status:      zt.Status,
		RequesterID: zt.RequesterID,
		SubmitterID: zt.RequesterID,
		Tags:        nonNil(slices.Clone(zt.Tags)),
		CreatedAt:   zendeskTime(zt.createdAt),
		UpdatedAt:   zendeskTime(zt.updatedAt),
	}
}

type viaJSON struct {
	Channel string `json:"channel"`
	Source  struct {
		From map[string]any `json:"from"`
		To   map[string]any `json:"to"`
		Rel  *string        `json:"rel"`
	} `json:"source"`
}

func newVia(channel string) viaJSON {
	v := viaJSON{Channel: channel}
	v.Source.From = map[string]any{}
	v.Source.To = map[string]any{}
	return v
}

type commentJSON struct {
	ID          int64          `json:"id"`
	Type        string         `json:"type"`
	AuthorID    int64          `json:"author_id"`
	Body        string         `json:"body"`
	HTMLBody    string         `json:"html_body"`
	PlainBody   string         `json:"plain_body"`
	Public      bool           `json:"public"`
	Attachments []any          `json:"attachments"`
	AuditID     int64          `json:"audit_id"`
	Via         viaJSON        `json:"via"`
	CreatedAt   string         `json:"created_at"`
	Metadata    map[string]any `json:"metadata"`
}

func newCommentJSON(c zComment) commentJSON {
	channel := "web"
	if c.viaAPI {
		channel = "api"
	}
	return commentJSON{
		ID:          c.ID,
		Type:        "Comment",
		AuthorID:    c.authorID,
		Body:        c.Body,
		HTMLBody:    c.htmlBody,
		PlainBody:   c.Body,
		Public:      c.Public,
		Attachments: []any{},
		AuditID:     c.AuditID,
		Via:         newVia(channel),
		CreatedAt:   zendeskTime(c.At),
		Metadata:    newAuditMetadata(c.Metadata).asMap(),
	}
}

// commentEvent is the audit event that records a comment.
func commentEvent(c zComment) map[string]any {
	return map[string]any{
		"id":          c.ID,
		"type":        "Comment",
		"author_id":   c.authorID,
		"body":        c.Body,
		"html_body":   c.htmlBody,
		"plain_body":  c.Body,
		"public":      c.Public,
		"attachments": []any{},
		"audit_id":    c.AuditID,
	}
}

// commentAddedEvent is a ticket.comment_added event's object.
func commentAddedEvent(c zComment, staff bool) map[string]any {
	name := "Customer"
	if staff {
		name = "Support Agent"
	}
	return map[string]any{"comment": map[string]any{
		"id": strconv.FormatInt(c.ID, 10), "body": c.Body, "html_body": c.htmlBody, "is_public": c.Public,
		"author": map[string]any{"id": strconv.FormatInt(c.authorID, 10), "is_staff": staff, "name": name},
	}}
}

func changeEvent(id int64, field string, value, previous any) map[string]any {
	return map[string]any{
		"id": id, "type": "Change", "field_name": field, "value": value, "previous_value": previous,
	}
}

type auditMetadata struct {
	Custom map[string]any `json:"custom"`
	System map[string]any `json:"system"`
}

// newAuditMetadata wraps the request's metadata the way Zendesk stores it.
// custom is deep-copied, so later mutation by anyone can't change history.
func newAuditMetadata(custom map[string]any) auditMetadata {
	c := map[string]any{}
	if custom != nil {
		c = deepCopyJSON(custom).(map[string]any)
	}
	return auditMetadata{
		Custom: c,
		System: map[string]any{"client": "stand-in", "ip_address": "127.0.0.1"},
	}
}

func (m auditMetadata) asMap() map[string]any {
	return map[string]any{"custom": m.Custom, "system": m.System}
}

type auditJSON struct {
	ID        int64         `json:"id"`
	TicketID  int64         `json:"ticket_id"`
	CreatedAt string        `json:"created_at"`
	AuthorID  int64         `json:"author_id"`
	Metadata  auditMetadata `json:"metadata"`
	Via       viaJSON       `json:"via"`
	Events    []any         `json:"events"`
	// at is CreatedAt with its full precision, for the exports' order.
	at time.Time
}

// zendeskTime formats t the way Zendesk does: UTC, whole seconds.
func zendeskTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// textToHTML renders a plain-text comment roughly as Zendesk does.
func textToHTML(s string) string {
	return `<div class="zd-comment" dir="auto"><p>` + strings.ReplaceAll(html.EscapeString(s), "\n", "<br>") + "</p></div>"
}

// htmlToText crudely strips tags from an html_body-only comment; enough to
// decide whether it is blank and to fill body.
func htmlToText(s string) string {
	var b strings.Builder
	inTag := false
	for _, r := range s {
		switch {
		case r == '<':
			inTag = true
		case r == '>':
			inTag = false
		case !inTag:
			b.WriteRune(r)
		}
	}
	return html.UnescapeString(b.String())
}

// nonNil turns a nil slice into an empty one so it encodes as [] not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// SetRequester makes requesterID the ticket's requester, as an agent
// changing it in Zendesk does (updated_at moves). It reports false for an
// unknown ticket.
func (z *Zendesk) SetRequester(ticketID, requesterID int64) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		return false
	}
	zt.RequesterID = requesterID
	if now := time.Now(); now.After(zt.updatedAt) {
		zt.updatedAt = now
	}
	return true
}
