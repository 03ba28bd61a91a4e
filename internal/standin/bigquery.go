package standin

import (
	"crypto/rand"
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
)

// BigQueryBasePath is the REST base that cloud.google.com/go/bigquery sends
// every request under. Point a client at server.URL + BigQueryBasePath
// (option.WithEndpoint). The stand-in serves the same paths without the
// prefix too, for a client given server.URL + "/" instead.
const BigQueryBasePath = "/bigquery/v2/"

// DefaultBigQueryBytesBilled is what jobs report as billed until
// SetBytesBilled: BigQuery bills at least 10 MB for every query, and a
// lookup of one customer never scans more.
const DefaultBigQueryBytesBilled int64 = 10 << 20

// BigQueryBytesProcessed is what every completed job reports as processed.
// It differs from any billed value, so a test can tell the two apart.
const BigQueryBytesProcessed int64 = 1_572_864

// maxBigQueryRequestBody bounds a request body; queries are small, this
// only protects the stand-in.
const maxBigQueryRequestBody = 1 << 20

// defaultBigQueryLocation is where a job runs when the request names none,
// as in BigQuery.
const defaultBigQueryLocation = "US"

// requesterIDParam is the query parameter the stand-in answers by.
const requesterIDParam = "requester_id"

// BQCustomer is one customer as the stand-in's lookup query returns it.
type BQCustomer struct {
	CustomerID string
	Email      string
	// Orders is the customer's lifetime order count.
	Orders int64
	// ActiveSubscriptions are the IDs of the customer's active
	// subscriptions; the stand-in answers them sorted, as the lookup
	// query's ORDER BY does.
	ActiveSubscriptions []string
}

// BigQueryFault describes one misbehaviour of the BigQuery stand-in. It is
// separate from Fault because BigQuery misbehaves in ways HTTP faults cannot
// express (jobs that never finish), answers errors with a reason that
// clients act on, and, like ModelFault, ends every wait as soon as the
// client goes away: a query has no effect worth finishing.
//
// A request matches when both Method and Path match. A matched fault runs
// in this order: Arrived is notified, Delay is slept, then either Status is
// answered (nothing happens: no job is created) or the request is answered
// normally, altered by StayRunning and PendingPolls.
type BigQueryFault struct {
	// Times is how many matching requests the fault applies to: 0 means 1,
	// a negative value means forever.
	Times int
	// Method is the HTTP method to match; "" matches any method.
	Method string
	// Path is the exact URL path to match, as the client sends it (with
	// BigQueryBasePath), or a prefix when it ends in "*"; "" matches any
	// path. For example "/bigquery/v2/projects/p/jobs/*" faults only
	// jobs.get.
	Path string
	// Status, if non-zero, is answered instead of handling the request,
	// with BigQuery's error body.
	Status int
	// Reason is the error reason with Status ("backendError",
	// "rateLimitExceeded", "invalidQuery", ...); "" picks the reason
	// BigQuery uses for Status.
	Reason string
	// RetryAfter, with Status, sets the Retry-After header in whole seconds
	// (rounded up).
	RetryAfter time.Duration
	// Delay is slept before answering anything; it ends early, with no
	// answer and no job created, when the client goes away.
	Delay time.Duration
	// StayRunning, on jobs.query, creates a job that never completes:
	// jobs.query and every getQueryResults answer jobComplete:false and
	// jobs.get answers state RUNNING, forever. On getQueryResults or
	// jobs.get it makes only that answer report the job still running.
	StayRunning bool
	// PendingPolls, on jobs.query, creates a job that is still running
	// until that many getQueryResults requests have been answered
	// jobComplete:false, after which it completes normally: a slow query,
	// which sends the client down its polling path. jobs.get reports
	// RUNNING meanwhile.
	PendingPolls int
	// Arrived, if non-nil, is notified (non-blocking send) when a matching
	// request arrives, so a test can act mid-call.
	Arrived chan<- struct{}
}

// matches reports whether f selects r, with Fault's rules.
func (f *BigQueryFault) matches(r *http.Request) bool {
	return (&Fault{Method: f.Method, Path: f.Path}).matches(r)
}

// bqJob is the stand-in's state for one query job.
type bqJob struct {
	project  string
	id       string
	location string
	sql      string
	params   json.RawMessage // the request's queryParameters, echoed by jobs.get

	found    bool
	customer BQCustomer

	stayRunning  bool
	pendingPolls int
	bytesBilled  int64
	created      time.Time
	ended        time.Time // zero while running

	// lookupCounted records that the result was fully returned once, so
	// CompletedLookups counts each job at most once.
	lookupCounted bool
}

// complete reports whether the job has finished.
func (j *bqJob) complete() bool { return !j.stayRunning && j.pendingPolls == 0 }

// ref is the job's full reference as BigQuery prints it.
func (j *bqJob) ref() string { return j.project + ":" + j.location + "." + j.id }

// BigQuery is an http.Handler that stands in for the BigQuery REST API v2,
// serving the calls cloud.google.com/go/bigquery makes for a parameterized
// query read on its fast path (see the package doc). It does not parse SQL:
// every query is answered as supportflow's customer lookup, by the value of
// its @requester_id parameter. It is safe for concurrent use.
type BigQuery struct {
	project string

	faults    faultQueue[BigQueryFault]
	log       requestLog
	queries   atomic.Int64
	completed atomic.Int64

	mu            sync.Mutex
	customers     map[int64]BQCustomer
	jobs          map[string]*bqJob // by project + "/" + job ID
	byRequestID   map[string]string // project + "/" + requestId → jobs key
	nextJobID     string
	bytesBilled   int64
	lastSQL       string
	lastParams    map[string]string
	otherProjects []string
}

// NewBigQuery returns a BigQuery stand-in for project. It serves requests
// for any project, as BigQuery serves any project the caller may use, but
// records the others (OtherProjects) so a test can show that the client
// runs its jobs where it was configured to.
func NewBigQuery(project string) *BigQuery {
	return &BigQuery{
		project:     project,
		customers:   make(map[int64]BQCustomer),
		jobs:        make(map[string]*bqJob),
		byRequestID: make(map[string]string),
		bytesBilled: DefaultBigQueryBytesBilled,
	}
}

// AddCustomer seeds the customer whose zendesk_user_id is requesterID,
// replacing any seeded before. Jobs already run keep the answer they had:
// a BigQuery result is a snapshot.
func (b *BigQuery) AddCustomer(requesterID int64, c BQCustomer) {
	c.ActiveSubscriptions = slices.Clone(c.ActiveSubscriptions)
	slices.Sort(c.ActiveSubscriptions)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.customers[requesterID] = c
}

// SetNextJobID makes the next job created get id instead of a generated
// "job_<random>". A job with the same ID in the same project is replaced.
func (b *BigQuery) SetNextJobID(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextJobID = id
}

// SetBytesBilled sets the statistics.query.totalBytesBilled of jobs created
// from now on (DefaultBigQueryBytesBilled until then). Values above 2^31
// are what a client that decodes them into 32 bits gets wrong.
func (b *BigQuery) SetBytesBilled(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytesBilled = n
}

// Inject adds a fault; see BigQueryFault.
func (b *BigQuery) Inject(f BigQueryFault) { b.faults.inject(f, f.Times) }

// ClearFaults removes every injected fault. Jobs already created under
// StayRunning stay running.
func (b *BigQuery) ClearFaults() { b.faults.clear() }

// Queries returns how many jobs.query requests were received, including
// rejected and faulted ones: the number of attempts the client made,
// internal retries included.
func (b *BigQuery) Queries() int { return int(b.queries.Load()) }

// CompletedLookups returns how many jobs had their whole result returned
// (by jobs.query or getQueryResults), each job counted once.
func (b *BigQuery) CompletedLookups() int { return int(b.completed.Load()) }

// Requests returns how many requests with the method ("" for any) and a
// path starting with pathPrefix were received, including failed and
// faulted ones; for example Requests("GET", "/bigquery/v2/projects/p/queries/")
// counts getQueryResults polls.
func (b *BigQuery) Requests(method, pathPrefix string) int {
	return b.log.count(method, pathPrefix)
}

// LastQuery returns the SQL text and the parameters (name → value; arrays
// as "[a,b]") of the last jobs.query request that could be decoded,
// whether or not it was accepted, so a test can assert that values travel
// as parameters and never inside the SQL.
func (b *BigQuery) LastQuery() (sql string, params map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.lastParams))
	for k, v := range b.lastParams {
		out[k] = v
	}
	return b.lastSQL, out
}

// OtherProjects returns, sorted, the projects other than NewBigQuery's that
// request paths named.
func (b *BigQuery) OtherProjects() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.otherProjects)
}

// bqRouteKind is which REST method a request is for.
type bqRouteKind int

const (
	bqRouteUnknown      bqRouteKind = iota
	bqRouteQuery                    // POST projects/{p}/queries: jobs.query
	bqRouteQueryResults             // GET projects/{p}/queries/{job}: jobs.getQueryResults
	bqRouteGetJob                   // GET projects/{p}/jobs/{job}: jobs.get
)

type bqRoute struct {
	kind    bqRouteKind
	project string
	jobID   string
}

// parseBigQueryRoute maps a method and path, with or without
// BigQueryBasePath, to a REST method.
func parseBigQueryRoute(method, path string) bqRoute {
	rest, ok := strings.CutPrefix(path, strings.TrimSuffix(BigQueryBasePath, "/"))
	if !ok {
		rest = path
	}
	rest, ok = strings.CutPrefix(rest, "/projects/")
	if !ok {
		return bqRoute{}
	}
	segs := strings.Split(rest, "/")
	if slices.Contains(segs, "") {
		return bqRoute{}
	}
	switch {
	case len(segs) == 2 && segs[1] == "queries" && method == http.MethodPost:
		return bqRoute{kind: bqRouteQuery, project: segs[0]}
	case len(segs) == 3 && segs[1] == "queries" && method == http.MethodGet:
		return bqRoute{kind: bqRouteQueryResults, project: segs[0], jobID: segs[2]}
	case len(segs) == 3 && segs[1] == "jobs" && method == http.MethodGet:
		return bqRoute{kind: bqRouteGetJob, project: segs[0], jobID: segs[2]}
	}
	return bqRoute{}
}

// ServeHTTP implements http.Handler.
func (b *BigQuery) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.log.add(r)
	rt := parseBigQueryRoute(r.Method, r.URL.Path)
	if rt.kind == bqRouteQuery {
		b.queries.Add(1)
	}
	if rt.kind != bqRouteUnknown {
		b.recordProject(rt.project)
	}
	// Read the whole body first: only then does net/http watch the
	// connection and cancel the context when the client goes away, which
	// Delay relies on.
	raw, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBigQueryRequestBody))

	f := b.faults.take(func(f *BigQueryFault) bool { return f.matches(r) })
	if f != nil {
		if f.Arrived != nil {
			select {
			case f.Arrived <- struct{}{}:
			default:
			}
		}
		if !sleepContext(r.Context(), f.Delay) {
			return // the client went away; nobody to answer
		}
		if f.Status != 0 {
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(f.RetryAfter), 10))
			}
			reason := f.Reason
			if reason == "" {
				reason = bigQueryReasonFor(f.Status)
			}
			writeBigQueryError(w, f.Status, reason, fmt.Sprintf("injected fault: HTTP %d %s", f.Status, reason))
			return
		}
	}

	switch rt.kind {
	case bqRouteQuery:
		b.query(w, rt, raw, readErr, f)
	case bqRouteQueryResults:
		b.queryResults(w, r, rt, f)
	case bqRouteGetJob:
		b.getJob(w, r, rt, f)
	default:
		writeBigQueryError(w, http.StatusNotFound, "notFound",
			fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path))
	}
}

func (b *BigQuery) recordProject(project string) {
	if project == b.project {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i, found := slices.BinarySearch(b.otherProjects, project); !found {
		b.otherProjects = slices.Insert(b.otherProjects, i, project)
	}
}

// --- jobs.query ---

// bqQueryRequestJSON is the subset of a QueryRequest the stand-in reads.
type bqQueryRequestJSON struct {
	Query           string          `json:"query"`
	QueryParameters json.RawMessage `json:"queryParameters"`
	UseLegacySQL    *bool           `json:"useLegacySql"`
	Location        string          `json:"location"`
	RequestID       string          `json:"requestId"`
	MaxResults      int64           `json:"maxResults"`
	JobCreationMode string          `json:"jobCreationMode"`
	DryRun          bool            `json:"dryRun"`

	params []bqQueryParameter // QueryParameters decoded
}

type bqQueryParameter struct {
	Name          string `json:"name"`
	ParameterType struct {
		Type string `json:"type"`
	} `json:"parameterType"`
	ParameterValue bqParameterValue `json:"parameterValue"`
}

type bqParameterValue struct {
	Value       *string            `json:"value"`
	ArrayValues []bqParameterValue `json:"arrayValues"`
}

// String renders a value for LastQuery.
func (v bqParameterValue) String() string {
	if v.ArrayValues != nil {
		parts := make([]string, len(v.ArrayValues))
		for i, e := range v.ArrayValues {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	if v.Value == nil {
		return ""
	}
	return *v.Value
}

// query handles jobs.query: it creates a job answering the customer lookup
// and returns its first (and only) page when the job is complete.
func (b *BigQuery) query(w http.ResponseWriter, rt bqRoute, raw []byte, readErr error, f *BigQueryFault) {
	if readErr != nil {
		var tooBig *http.MaxBytesError
		if errors.As(readErr, &tooBig) {
			writeBigQueryError(w, http.StatusRequestEntityTooLarge, "invalid", "Request payload size exceeds the limit.")
			return
		}
		writeBigQueryError(w, http.StatusBadRequest, "invalid", "Could not read the request body.")
		return
	}
	var req bqQueryRequestJSON
	if err := json.Unmarshal(raw, &req); err != nil {
		writeBigQueryError(w, http.StatusBadRequest, "invalid", "Invalid JSON payload received: "+err.Error())
		return
	}
	if len(req.QueryParameters) > 0 {
		if err := json.Unmarshal(req.QueryParameters, &req.params); err != nil {
			writeBigQueryError(w, http.StatusBadRequest, "invalid", "Invalid queryParameters: "+err.Error())
			return
		}
	}
	b.recordQuery(&req)

	requesterID, reason, msg := checkLookupQuery(&req)
	if msg != "" {
		writeBigQueryError(w, http.StatusBadRequest, reason, msg)
		return
	}
	if req.DryRun {
		writeBigQueryError(w, http.StatusBadRequest, "invalid", "The stand-in does not support dry runs.")
		return
	}
	location := req.Location
	if location == "" {
		location = defaultBigQueryLocation
	}

	b.mu.Lock()
	var job *bqJob
	if req.RequestID != "" {
		// A retried request with the same requestId gets the same job, as
		// BigQuery deduplicates jobs.query by requestId.
		job = b.jobs[b.byRequestID[rt.project+"/"+req.RequestID]]
	}
	if job == nil {
		job = b.newJobLocked(rt.project, location, &req, requesterID, f)
		if req.RequestID != "" {
			b.byRequestID[rt.project+"/"+req.RequestID] = rt.project + "/" + job.id
		}
	}
	resp := b.resultsLocked(job, "bigquery#queryResponse", 0, req.MaxResults > 0, req.MaxResults, false)
	if resp.JobComplete {
		resp.TotalBytesBilled = strconv.FormatInt(job.bytesBilled, 10)
		cacheHit := false
		resp.CacheHit = &cacheHit
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// recordQuery keeps req for LastQuery.
func (b *BigQuery) recordQuery(req *bqQueryRequestJSON) {
	params := make(map[string]string, len(req.params))
	for _, p := range req.params {
		params[p.Name] = p.ParameterValue.String()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastSQL, b.lastParams = req.Query, params
}

// checkLookupQuery validates a lookup query the way BigQuery would refuse
// it, plus the stand-in's own rule that the requester ID travels only as a
// parameter. It returns the requester ID, or an error reason and message.
func checkLookupQuery(req *bqQueryRequestJSON) (requesterID int64, reason, msg string) {
	if strings.TrimSpace(req.Query) == "" {
		return 0, "invalid", "Required parameter is missing: query"
	}
	// jobs.query defaults to legacy SQL, which has no named parameters.
	if req.UseLegacySQL == nil || *req.UseLegacySQL {
		return 0, "invalidQuery", "Query parameters are not supported in legacy SQL; set useLegacySql to false."
	}
	var param *bqQueryParameter
	for i := range req.params {
		if strings.EqualFold(req.params[i].Name, requesterIDParam) {
			param = &req.params[i]
		}
	}
	if param == nil || !strings.Contains(strings.ToLower(req.Query), "@"+requesterIDParam) {
		return 0, "invalidQuery", "The stand-in answers only queries that filter on the query parameter @" + requesterIDParam + "."
	}
	if param.ParameterType.Type != "INT64" {
		return 0, "invalidQuery", fmt.Sprintf("Query parameter '%s' must be INT64 (zendesk_user_id is INT64), got %s.", requesterIDParam, param.ParameterType.Type)
	}
	if param.ParameterValue.Value == nil {
		return 0, "invalidQuery", fmt.Sprintf("Query parameter '%s' has no value.", requesterIDParam)
	}
	id, err := strconv.ParseInt(*param.ParameterValue.Value, 10, 64)
	if err != nil {
		return 0, "invalid", fmt.Sprintf("Invalid INT64 value for query parameter '%s'.", requesterIDParam)
	}
	if containsNumberLiteral(req.Query, id) {
		return 0, "invalidQuery", "The query text contains the requester ID as a literal; values must be sent as query parameters."
	}
	return id, "", ""
}

// containsNumberLiteral reports whether sql has n's digits as a token of
// their own (not part of an identifier or a longer number).
func containsNumberLiteral(sql string, n int64) bool {
	digits := strings.TrimPrefix(strconv.FormatInt(n, 10), "-")
	for i := 0; i < len(sql); {
		j := strings.Index(sql[i:], digits)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(digits)
		before := start == 0 || !isIdentByte(sql[start-1])
		after := end == len(sql) || !isIdentByte(sql[end])
		if before && after {
			return true
		}
		i = start + 1
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// newJobLocked creates and stores a job for req; b.mu must be held.
func (b *BigQuery) newJobLocked(project, location string, req *bqQueryRequestJSON, requesterID int64, f *BigQueryFault) *bqJob {
	id := b.nextJobID
	b.nextJobID = ""
	if id == "" {
		id = "job_" + rand.Text()
	}
	c, found := b.customers[requesterID]
	now := time.Now()
	job := &bqJob{
		project:     project,
		id:          id,
		location:    location,
		sql:         req.Query,
		params:      req.QueryParameters,
		found:       found,
		customer:    c,
		bytesBilled: b.bytesBilled,
		created:     now,
	}
	if f != nil {
		job.stayRunning = f.StayRunning
		job.pendingPolls = max(f.PendingPolls, 0)
	}
	if job.complete() {
		job.ended = now
	}
	b.jobs[project+"/"+id] = job
	return job
}

// --- jobs.getQueryResults ---

// queryResults handles jobs.getQueryResults: the job's result page, or
// jobComplete:false while it runs.
func (b *BigQuery) queryResults(w http.ResponseWriter, r *http.Request, rt bqRoute, f *BigQueryFault) {
	q := r.URL.Query()
	b.mu.Lock()
	job, ok := b.lookupJobLocked(rt, q.Get("location"))
	if !ok {
		b.mu.Unlock()
		writeJobNotFound(w, rt, q.Get("location"))
		return
	}
	start := 0
	if tok := q.Get("pageToken"); tok != "" {
		n, err := parsePageToken(tok)
		if err != nil {
			b.mu.Unlock()
			writeBigQueryError(w, http.StatusBadRequest, "invalid", "Invalid page token.")
			return
		}
		start = n
	} else if si := q.Get("startIndex"); si != "" {
		n, err := strconv.ParseUint(si, 10, 31)
		if err != nil {
			b.mu.Unlock()
			writeBigQueryError(w, http.StatusBadRequest, "invalid", "Invalid startIndex.")
			return
		}
		start = int(n)
	}
	hasMax := q.Has("maxResults")
	var maxResults int64
	if hasMax {
		n, err := strconv.ParseUint(q.Get("maxResults"), 10, 32)
		if err != nil {
			b.mu.Unlock()
			writeBigQueryError(w, http.StatusBadRequest, "invalid", "Invalid maxResults.")
			return
		}
		maxResults = int64(n)
	}
	forceRunning := f != nil && f.StayRunning
	if !job.stayRunning && !forceRunning && job.pendingPolls > 0 {
		job.pendingPolls--
		forceRunning = true
		if job.complete() {
			job.ended = time.Now()
		}
	}
	resp := b.resultsLocked(job, "bigquery#getQueryResultsResponse", start, hasMax, maxResults, forceRunning)
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// lookupJobLocked finds the job rt names, which must run in location when
// one is given; b.mu must be held.
func (b *BigQuery) lookupJobLocked(rt bqRoute, location string) (*bqJob, bool) {
	job, ok := b.jobs[rt.project+"/"+rt.jobID]
	if !ok || (location != "" && !strings.EqualFold(location, job.location)) {
		return nil, false
	}
	return job, true
}

func writeJobNotFound(w http.ResponseWriter, rt bqRoute, location string) {
	if location == "" {
		location = defaultBigQueryLocation
	}
	writeBigQueryError(w, http.StatusNotFound, "notFound",
		fmt.Sprintf("Not found: Job %s:%s.%s", rt.project, location, rt.jobID))
}

// pageToken and parsePageToken encode a start row; real tokens are opaque
// too, so clients cannot depend on the format.
func pageToken(start int) string { return "standin-page-" + strconv.Itoa(start) }

func parsePageToken(tok string) (int, error) {
	s, ok := strings.CutPrefix(tok, "standin-page-")
	if !ok {
		return 0, errors.New("not a stand-in page token")
	}
	n, err := strconv.ParseUint(s, 10, 31)
	return int(n), err
}

// bqResultsJSON is a QueryResponse or GetQueryResultsResponse.
type bqResultsJSON struct {
	Kind                string        `json:"kind"`
	JobReference        bqJobRefJSON  `json:"jobReference"`
	JobComplete         bool          `json:"jobComplete"`
	Schema              *bqSchemaJSON `json:"schema,omitempty"`
	Rows                []bqRowJSON   `json:"rows,omitempty"`
	TotalRows           string        `json:"totalRows,omitempty"`
	PageToken           string        `json:"pageToken,omitempty"`
	TotalBytesProcessed string        `json:"totalBytesProcessed,omitempty"`
	TotalBytesBilled    string        `json:"totalBytesBilled,omitempty"`
	CacheHit            *bool         `json:"cacheHit,omitempty"`
}

type bqJobRefJSON struct {
	ProjectID string `json:"projectId"`
	JobID     string `json:"jobId"`
	Location  string `json:"location"`
}

type bqSchemaJSON struct {
	Fields []bqFieldJSON `json:"fields"`
}

type bqFieldJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Mode string `json:"mode"`
}

// bqRowJSON is a row in BigQuery's f/v encoding: {"f":[{"v":...},...]}.
type bqRowJSON struct {
	F []bqCellJSON `json:"f"`
}

// bqCellJSON is a cell: V is a string, nil (NULL) or, for a REPEATED
// column, a []bqCellJSON.
type bqCellJSON struct {
	V any `json:"v"`
}

// lookupSchema is the lookup query's result schema, as BigQuery's REST API
// names the types (INTEGER for INT64).
var lookupSchema = bqSchemaJSON{Fields: []bqFieldJSON{
	{Name: "customer_id", Type: "STRING", Mode: "NULLABLE"},
	{Name: "email", Type: "STRING", Mode: "NULLABLE"},
	{Name: "lifetime_orders", Type: "INTEGER", Mode: "NULLABLE"},
	{Name: "active_subscriptions", Type: "STRING", Mode: "REPEATED"},
}}

// rows returns the job's result rows.
func (j *bqJob) rows() []bqRowJSON {
	if !j.found {
		return nil
	}
	subs := make([]bqCellJSON, len(j.customer.ActiveSubscriptions))
	for i, s := range j.customer.ActiveSubscriptions {
		subs[i] = bqCellJSON{V: s}
	}
	return []bqRowJSON{{F: []bqCellJSON{
		{V: j.customer.CustomerID},
		{V: j.customer.Email},
		{V: strconv.FormatInt(j.customer.Orders, 10)},
		{V: subs},
	}}}
}

// resultsLocked builds the answer for job from row start, at most
// maxResults rows when limited, and counts a fully returned lookup;
// b.mu must be held. Rows are omitted when there are none, as BigQuery
// does.
func (b *BigQuery) resultsLocked(job *bqJob, kind string, start int, limited bool, maxResults int64, forceRunning bool) bqResultsJSON {
	resp := bqResultsJSON{
		Kind:         kind,
		JobReference: bqJobRefJSON{ProjectID: job.project, JobID: job.id, Location: job.location},
	}
	if !job.complete() || forceRunning {
		return resp
	}
	rows := job.rows()
	start = min(start, len(rows))
	end := len(rows)
	if limited {
		end = start + int(min(maxResults, int64(len(rows)-start)))
	}
	resp.JobComplete = true
	schema := lookupSchema
	resp.Schema = &schema
	resp.Rows = rows[start:end]
	resp.TotalRows = strconv.Itoa(len(rows))
	resp.TotalBytesProcessed = strconv.FormatInt(BigQueryBytesProcessed, 10)
	if end < len(rows) {
		resp.PageToken = pageToken(end)
	}
	// Count before answering, so that a client that has its rows always
	// sees them counted.
	if end == len(rows) && !job.lookupCounted {
		job.lookupCounted = true
		b.completed.Add(1)
	}
	return resp
}

// --- jobs.get ---

type bqJobJSON struct {
	Kind          string              `json:"kind"`
	ID            string              `json:"id"`
	JobReference  bqJobRefJSON        `json:"jobReference"`
	Configuration bqJobConfigJSON     `json:"configuration"`
	Status        bqJobStatusJSON     `json:"status"`
	Statistics    bqJobStatisticsJSON `json:"statistics"`
}

type bqJobConfigJSON struct {
	JobType string            `json:"jobType"`
	Query   bqQueryConfigJSON `json:"query"`
}

type bqQueryConfigJSON struct {
	Query           string          `json:"query"`
	UseLegacySQL    bool            `json:"useLegacySql"`
	Priority        string          `json:"priority"`
	QueryParameters json.RawMessage `json:"queryParameters,omitempty"`
}

type bqJobStatusJSON struct {
	State string `json:"state"`
}

type bqJobStatisticsJSON struct {
	CreationTime        string            `json:"creationTime"`
	StartTime           string            `json:"startTime"`
	EndTime             string            `json:"endTime,omitempty"`
	TotalBytesProcessed string            `json:"totalBytesProcessed,omitempty"`
	Query               *bqQueryStatsJSON `json:"query,omitempty"`
}

type bqQueryStatsJSON struct {
	TotalBytesProcessed string `json:"totalBytesProcessed"`
	TotalBytesBilled    string `json:"totalBytesBilled"`
	StatementType       string `json:"statementType"`
	CacheHit            bool   `json:"cacheHit"`
}

// getJob handles jobs.get.
func (b *BigQuery) getJob(w http.ResponseWriter, r *http.Request, rt bqRoute, f *BigQueryFault) {
	location := r.URL.Query().Get("location")
	b.mu.Lock()
	job, ok := b.lookupJobLocked(rt, location)
	if !ok {
		b.mu.Unlock()
		writeJobNotFound(w, rt, location)
		return
	}
	done := job.complete() && !(f != nil && f.StayRunning)
	resp := bqJobJSON{
		Kind:         "bigquery#job",
		ID:           job.ref(),
		JobReference: bqJobRefJSON{ProjectID: job.project, JobID: job.id, Location: job.location},
		Configuration: bqJobConfigJSON{
			JobType: "QUERY",
			Query: bqQueryConfigJSON{
				Query:           job.sql,
				UseLegacySQL:    false,
				Priority:        "INTERACTIVE",
				QueryParameters: job.params,
			},
		},
		Status: bqJobStatusJSON{State: "RUNNING"},
		Statistics: bqJobStatisticsJSON{
			CreationTime: unixMillis(job.created),
			StartTime:    unixMillis(job.created),
		},
	}
	if done {
		processed := strconv.FormatInt(BigQueryBytesProcessed, 10)
		resp.Status.State = "DONE"
		resp.Statistics.EndTime = unixMillis(job.ended)
		resp.Statistics.TotalBytesProcessed = processed
		resp.Statistics.Query = &bqQueryStatsJSON{
			TotalBytesProcessed: processed,
			TotalBytesBilled:    strconv.FormatInt(job.bytesBilled, 10),
			StatementType:       "SELECT",
		}
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// unixMillis renders t as BigQuery does: milliseconds since the epoch, as a
// string.
func unixMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// --- errors ---

// bqErrorJSON is BigQuery's (Google APIs') error body.
type bqErrorJSON struct {
	Error bqErrorBodyJSON `json:"error"`
}

type bqErrorBodyJSON struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Errors  []bqErrorItemJSON `json:"errors"`
	Status  string            `json:"status"`
}

type bqErrorItemJSON struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Domain  string `json:"domain"`
}

// writeBigQueryError answers status with BigQuery's error body.
func writeBigQueryError(w http.ResponseWriter, status int, reason, message string) {
	writeJSON(w, status, bqErrorJSON{Error: bqErrorBodyJSON{
		Code:    status,
		Message: message,
		Errors:  []bqErrorItemJSON{{Reason: reason, Message: message, Domain: "global"}},
		Status:  bigQueryStatusFor(status),
	}})
}

// bigQueryReasonFor is the reason BigQuery most often gives with status.
func bigQueryReasonFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authError"
	case status == http.StatusForbidden:
		return "accessDenied"
	case status == http.StatusNotFound:
		return "notFound"
	case status == http.StatusConflict:
		return "duplicate"
	case status == http.StatusTooManyRequests:
		return "rateLimitExceeded"
	case status == http.StatusNotImplemented:
		return "notImplemented"
	case status >= 500:
		return "backendError"
	}
	return "invalid"
}

// bigQueryStatusFor is the canonical status name Google APIs send with an
// HTTP status.
func bigQueryStatusFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ALREADY_EXISTS"
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}
