// Package bqlookup looks up the commerce data supportflow enriches each
// Zendesk ticket with: the requester's customer record, lifetime order
// count and active subscriptions, from BigQuery. The same client talks to
// BigQuery and to the in-process stand-in of package standin.
//
// It is a thin layer over cloud.google.com/go/bigquery that fixes what
// supportflow's activities need:
//
//   - One parameterized query per lookup (lookupSQL): the requester ID only
//     ever travels as a query parameter, and the dataset, the one
//     identifier spliced into the SQL, is validated by New.
//   - The query runs on the library's jobs.query fast path (Query.Read),
//     which returns the rows with the job's completion in one round trip;
//     the Storage Read API is never enabled, so no gRPC connection is made.
//     Statistics (bytes billed and processed) come from one jobs.get.
//   - Every call needs a context deadline. The library retries 5xx
//     answers, backendError and rateLimitExceeded internally until its
//     context ends, so without a deadline a BigQuery outage would hang the
//     activity forever instead of failing it back to Temporal.
//   - Its errors say what the caller can do next, the same way the other
//     clients' errors do: *Error has Permanent, MayHaveLanded and
//     RetryAfterDelay, and a cancelled or expired context is always
//     visible through errors.Is.
package bqlookup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/bigquery"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/httpretry"
)

// ErrConfig is wrapped by every error New returns for a bad Config, so a
// caller can tell a misconfiguration (fix the settings) from a failure to
// reach BigQuery.
var ErrConfig = errors.New("bqlookup: invalid configuration")

// ErrNoDeadline is wrapped by the error LookupCustomer returns, before
// sending anything, for a context without a deadline: the library's
// internal retries would otherwise never end during an outage.
var ErrNoDeadline = errors.New("bqlookup: context has no deadline")

// DefaultLocation is where jobs run when Config.Location is empty.
const DefaultLocation = "US"

// Config says which BigQuery to query and where the data is.
type Config struct {
	// Endpoint is the BigQuery REST base, for example a stand-in's URL +
	// "/bigquery/v2/". "" means Google's, with Application Default
	// Credentials. With an Endpoint no credentials are sent (the stand-in
	// needs none), unless HTTPClient adds them itself.
	Endpoint string
	// ProjectID is the project jobs run (and are billed) in, and the one
	// holding Dataset. Required.
	ProjectID string
	// Dataset is the dataset holding the customers, orders and
	// subscriptions tables. Required; only letters, digits and
	// underscores, since it is spliced into the SQL as an identifier.
	Dataset string
	// Location is where jobs run, such as "US", "EU" or "europe-west1";
	// "" means DefaultLocation. It must be the dataset's location.
	Location string
	// HTTPClient, if not nil, carries every request. The library then
	// uses it as it is, adding no credentials, so for Google's endpoint
	// it must authenticate by itself. Deadlines come from each call's
	// context.
	HTTPClient *http.Client
}

// datasetPattern is what a dataset ID may contain; BigQuery also limits
// its length to maxDatasetLen.
var datasetPattern = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

const maxDatasetLen = 1024

// projectPattern admits project IDs, including legacy domain-scoped ones
// ("example.com:proj"), and nothing that could end a quoted identifier.
var projectPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:-]{0,127}$`)

// Client looks up customers in one dataset. It is safe for concurrent use.
type Client struct {
	bq       *bigquery.Client
	project  string
	location string
	sql      string
}

// New returns a client for cfg. It checks the configuration and builds the
// BigQuery client, but does not contact BigQuery, so a worker can start
// while BigQuery is unreachable. Configuration errors wrap ErrConfig.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if !projectPattern.MatchString(cfg.ProjectID) {
		return nil, fmt.Errorf("%w: ProjectID %q is empty or not a project ID", ErrConfig, cfg.ProjectID)
	}
	if !datasetPattern.MatchString(cfg.Dataset) || len(cfg.Dataset) > maxDatasetLen {
		return nil, fmt.Errorf("%w: Dataset %q must be letters, digits and underscores only", ErrConfig, cfg.Dataset)
	}
	location := strings.TrimSpace(cfg.Location)
	if location == "" {
		location = DefaultLocation
	}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		endpoint, err := checkEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, option.WithEndpoint(endpoint), option.WithoutAuthentication())
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	bq, err := bigquery.NewClient(ctx, cfg.ProjectID, opts...)
	if err != nil {
		// Finding Application Default Credentials is the usual failure;
		// its message names the places searched, never a secret.
		return nil, fmt.Errorf("bqlookup: create BigQuery client: %w", err)
	}
	bq.Location = location
	return &Client{
		bq:       bq,
		project:  cfg.ProjectID,
		location: location,
		sql:      lookupSQL(cfg.ProjectID, cfg.Dataset),
	}, nil
}

// checkEndpoint validates a REST base and gives it the trailing slash the
// library needs: it resolves "projects/..." against the base, which would
// otherwise replace the base's last segment.
func checkEndpoint(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w: Endpoint does not parse as a URL", ErrConfig)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: Endpoint %q: scheme must be http or https", ErrConfig, u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("%w: Endpoint %q has no host", ErrConfig, u.Redacted())
	}
	if u.User != nil {
		// Credentials in the URL would reach every transport error.
		return "", fmt.Errorf("%w: Endpoint %q must not contain credentials", ErrConfig, u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: Endpoint %q must not have a query or fragment", ErrConfig, u.Redacted())
	}
	if !strings.HasSuffix(endpoint, "/") {
		endpoint += "/"
	}
	return endpoint, nil
}

// Close releases the client's resources.
func (c *Client) Close() error { return c.bq.Close() }

// lookupSQL is the one lookup query, for the dataset's tables in project.
// Both identifiers are validated by New and backquoted; the requester ID is
// only ever the parameter @requester_id. It returns at most one row per
// customer linked to the Zendesk user, ordered by customer_id so that a
// user linked to several customers always gets the same one:
//
//   - customer_id, email: the customer (customers.zendesk_user_id is the
//     Zendesk user ID);
//   - lifetime_orders: the count of the customer's orders (INT64);
//   - active_subscriptions: the IDs of the customer's subscriptions with
//     status 'active', sorted, as an ARRAY<STRING> (empty, never NULL,
//     when there are none).
//
// The SQL contains no numeric literal, so a test can check that the
// requester ID never appears in it.
func lookupSQL(project, dataset string) string {
	table := func(name string) string { return "`" + project + "." + dataset + "." + name + "`" }
	return `SELECT
  c.customer_id,
  c.email,
  (SELECT COUNT(*) FROM ` + table("orders") + ` AS o
     WHERE o.customer_id = c.customer_id) AS lifetime_orders,
  ARRAY(SELECT s.subscription_id FROM ` + table("subscriptions") + ` AS s
     WHERE s.customer_id = c.customer_id AND s.status = 'active'
     ORDER BY s.subscription_id) AS active_subscriptions
FROM ` + table("customers") + ` AS c
WHERE c.zendesk_user_id = @requester_id
ORDER BY c.customer_id`
}

// Result is the outcome of one lookup.
type Result struct {
	// Found is false when no customer is linked to the requester.
	Found bool
	// Customer is the customer when Found.
	Customer supportflow.Customer
	// JobID is the job's full reference as BigQuery prints it,
	// "{project}:{location}.{jobId}", for finding the job in the console
	// or the audit logs.
	JobID string
	// BytesBilled is what BigQuery billed for the query
	// (statistics.query.totalBytesBilled), for cost tracking.
	BytesBilled int64
	// BytesProcessed is what the query scanned
	// (statistics.query.totalBytesProcessed).
	BytesProcessed int64
}

// LookupCustomer runs the lookup query (lookupSQL) for the Zendesk user
// requesterID and returns the customer linked to it, if any, with the
// job's reference and cost.
//
// It uses Query.Read, so the query runs with jobs.query, which answers the
// rows at once when the job completes within the call; otherwise the
// library polls jobs.getQueryResults until it does. Then it reads the job's
// statistics with jobs.get. Nothing changes anywhere, so any failure may
// be retried without harm.
//
// ctx must carry a deadline: without one LookupCustomer fails at once,
// sending nothing, with an error wrapping ErrNoDeadline. The library
// retries 5xx answers and the reasons backendError, rateLimitExceeded,
// jobRateLimitExceeded and internalError internally, with backoff, until
// ctx ends. Its errors:
//
//   - BigQuery answered an error that the library does not retry, such as
//     400 invalidQuery or 404 notFound: *Error with the status and reason;
//   - ctx ended while the library was retrying an error answer: *Error
//     with the last answer's status and reason, which also wraps ctx.Err(),
//     so both errors.As(err, **Error) and errors.Is(err,
//     context.DeadlineExceeded) hold, and Permanent is false;
//   - ctx ended during a request or while waiting for the job, with no
//     error answer: *Error with Status 0 wrapping ctx.Err();
//   - no response (connection refused, reset): *Error with Status 0
//     wrapping the transport error;
//   - the job itself failed: *Error with Status 0 and the job's reason.
func (c *Client) LookupCustomer(ctx context.Context, requesterID int64) (Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		return Result{}, &Error{
			Op:        "lookup",
			Message:   "refused a context without a deadline",
			Err:       ErrNoDeadline,
			permanent: true,
		}
	}
	q := c.bq.Query(c.sql)
	q.Parameters = []bigquery.QueryParameter{{Name: "requester_id", Value: requesterID}}
	// On the fast path the library takes the location from the query,
	// not from Client.Location.
	q.Location = c.location
	// A job is what carries the reference and the statistics; without
	// this BigQuery may answer small queries without creating one.
	q.JobCreationMode = bigquery.JobCreationModeRequired

	it, err := q.Read(ctx)
	if err != nil {
		return Result{}, newError(ctx, "query", err)
	}
	var res Result
	for {
		var row customerRow
		err := it.Next(&row)
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return Result{}, newError(ctx, "read rows", err)
		}
		if !res.Found {
			// Rows come ordered by customer_id; the first one wins.
			res.Found, res.Customer = true, row.Customer
		}
	}

	job := it.SourceJob()
	if job == nil {
		// JobCreationModeRequired makes BigQuery always create a job.
		return Result{}, &Error{Op: "query", Message: "BigQuery answered without a job reference"}
	}
	res.JobID = job.ProjectID() + ":" + job.Location() + "." + job.ID()
	status, err := job.Status(ctx)
	if err != nil {
		return Result{}, newError(ctx, "get job statistics", err)
	}
	if err := status.Err(); err != nil {
		return Result{}, newError(ctx, "get job statistics", err)
	}
	if st := status.Statistics; st != nil {
		res.BytesProcessed = st.TotalBytesProcessed
		if qs, ok := st.Details.(*bigquery.QueryStatistics); ok {
			res.BytesBilled = qs.TotalBytesBilled
			if qs.TotalBytesProcessed != 0 {
				res.BytesProcessed = qs.TotalBytesProcessed
			}
		}
	}
	return res, nil
}

// customerRow loads one result row by column name, so the column order of
// the SQL is not relied on and NULLs become zero values.
type customerRow struct {
	supportflow.Customer
}

// Load implements bigquery.ValueLoader.
func (r *customerRow) Load(values []bigquery.Value, schema bigquery.Schema) error {
	seen := 0
	for i, f := range schema {
		if i >= len(values) {
			break
		}
		v := values[i]
		var ok bool
		switch f.Name {
		case "customer_id":
			r.CustomerID, ok = stringValue(v)
		case "email":
			r.Email, ok = stringValue(v)
		case "lifetime_orders":
			r.LifetimeOrders, ok = int64Value(v)
		case "active_subscriptions":
			r.ActiveSubscriptions, ok = stringsValue(v)
		default:
			continue
		}
		if !ok {
			return fmt.Errorf("bqlookup: column %s has unexpected type %T", f.Name, v)
		}
		seen++
	}
	if seen != 4 {
		return fmt.Errorf("bqlookup: result has %d of the 4 expected columns", seen)
	}
	if r.ActiveSubscriptions == nil {
		r.ActiveSubscriptions = []string{}
	}
	return nil
}

func stringValue(v bigquery.Value) (string, bool) {
	if v == nil {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}

func int64Value(v bigquery.Value) (int64, bool) {
	if v == nil {
		return 0, true
	}
	n, ok := v.(int64)
	return n, ok
}

func stringsValue(v bigquery.Value) ([]string, bool) {
	if v == nil {
		return nil, true
	}
	vs, ok := v.([]bigquery.Value)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(vs))
	for _, e := range vs {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// newError classifies an error from the library.
func newError(ctx context.Context, op string, err error) *Error {
	e := &Error{Op: op}
	var apiErr *googleapi.Error
	var jobErr *bigquery.Error
	switch {
	case errors.As(err, &apiErr):
		// Copy what is needed: the response headers and body stay behind.
		e.Status = apiErr.Code
		e.Message = apiErr.Message
		if len(apiErr.Errors) > 0 {
			e.Reason = apiErr.Errors[0].Reason
			if e.Message == "" {
				e.Message = apiErr.Errors[0].Message
			}
		}
		e.RetryAfter = httpretry.RetryAfter(apiErr.Header, time.Now())
		// The library keeps retrying until ctx ends; the answer is then
		// only the last of several.
		e.Err = ctx.Err()
	case errors.As(err, &jobErr):
		e.Reason, e.Message = jobErr.Reason, jobErr.Message
	case ctx.Err() != nil:
		// Mid-request, or while polling a job that had not finished.
		e.Message = "stopped waiting for BigQuery"
		e.Err = err
		if !errors.Is(err, ctx.Err()) {
			e.Err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	default:
		e.Message = "no answer"
		e.Err = err
	}
	return e
}

// Error is a failed lookup.
type Error struct {
	// Op is the step that failed: "query", "read rows", "get job
	// statistics" or "lookup".
	Op string
	// Status is the HTTP status BigQuery answered, or 0 when there was no
	// error answer (a transport failure, the context ending, a failed
	// job).
	Status int
	// Reason is BigQuery's error reason ("invalidQuery", "notFound",
	// "rateLimitExceeded", "backendError", ...), or "".
	Reason string
	// Message is BigQuery's error message, or a description.
	Message string
	// RetryAfter is the server's Retry-After, or 0.
	RetryAfter time.Duration
	// Err is the underlying error, if any: ctx.Err() when the context
	// ended, or the transport error.
	Err error

	permanent bool // refused before anything was sent
}

// Error describes the failure, such as "bqlookup: query: HTTP 400
// invalidQuery: Unrecognized name". It never contains credentials or
// request headers.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("bqlookup: ")
	if e.Op != "" {
		fmt.Fprintf(&b, "%s: ", e.Op)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, "HTTP %d", e.Status)
		if e.Reason != "" {
			fmt.Fprintf(&b, " %s", e.Reason)
		}
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
	} else {
		if e.Reason != "" {
			fmt.Fprintf(&b, "%s: ", e.Reason)
		}
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if e.Err != nil {
		// Transport errors name the URL, which holds no credentials (New
		// refuses an Endpoint with user info).
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the underlying error, so errors.Is(err,
// context.DeadlineExceeded) and the like work.
func (e *Error) Unwrap() error { return e.Err }

// retryableForbidden are the 403 reasons that mean "not now" rather than
// "not allowed".
var retryableForbidden = map[string]bool{"rateLimitExceeded": true, "quotaExceeded": true}

// permanentJobReasons are job failure reasons that running the same query
// again cannot fix.
var permanentJobReasons = map[string]bool{
	"invalid": true, "invalidQuery": true, "notFound": true, "accessDenied": true,
}

// Permanent reports whether running the same lookup again cannot succeed:
// an invalid query or request (400), bad credentials (401), no access
// (403, except the rateLimitExceeded and quotaExceeded reasons, which pass
// with time), a missing dataset, table or job (404), or a context without
// a deadline. Everything else (5xx, rate limits, the context ending, no
// answer) may pass on a later attempt.
func (e *Error) Permanent() bool {
	switch {
	case e.permanent:
		return true
	case e.Status == http.StatusForbidden:
		return !retryableForbidden[e.Reason]
	case e.Status != 0:
		return httpretry.PermanentStatus(e.Status)
	}
	return permanentJobReasons[e.Reason]
}

// MayHaveLanded is always false: a lookup changes nothing, so retrying it
// can never apply anything twice.
func (e *Error) MayHaveLanded() bool { return false }

// RetryAfterDelay returns how long BigQuery asked the caller to wait (0
// when it did not say), for the retry policy to honour.
func (e *Error) RetryAfterDelay() time.Duration { return e.RetryAfter }
