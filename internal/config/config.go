// Package config reads supportflow's settings from the environment. Every
// setting is an environment variable with a documented default; secrets are
// read here and never logged (Redacted shows what is safe to print).
package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/codec"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
)

// temporalVars are the Temporal connection's variables (temporalconn).
func temporalVars() []Var {
	vs := make([]Var, len(temporalconn.Vars))
	for i, v := range temporalconn.Vars {
		vs[i] = Var(v)
	}
	return vs
}

// TemporalSettings reads the Temporal connection from the environment
// (temporalconn.FromEnv), its errors wrapping ErrConfig.
func TemporalSettings() (temporalconn.Settings, error) {
	s, err := temporalconn.FromEnv(os.Getenv)
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return s, nil
}

// Var documents one environment variable.
type Var struct {
	Name, Default, Help string
	Secret              bool
}

// Vars lists every variable the worker reads, for --help and the README.
var Vars = slices.Concat([]Var{
	{Name: "DATABASE_URL", Help: "PostgreSQL connection URL (required)", Secret: true},
}, temporalVars(), []Var{
	{Name: "SUPPORTFLOW_TASK_QUEUE", Default: "supportflow", Help: "task queue the worker polls and the starter starts on"},
	{Name: "SUPPORTFLOW_PAYLOAD_KEYS", Help: "keys every Temporal payload is encrypted with (AES-256-GCM): comma-separated ID:BASE64KEY, 32-byte keys (openssl rand -base64 32), the first encrypts, all decrypt; this or SUPPORTFLOW_PAYLOAD_KEYS_FILE is required by the worker, worker api and starter", Secret: true},
	{Name: "SUPPORTFLOW_PAYLOAD_KEYS_FILE", Help: "file with the payload keys instead, one ID:BASE64KEY a line (a mounted secret)"},
	{Name: codec.EnvAdmitUnsealed, Default: "false", Help: "true admits Temporal payloads that are not sealed (plain JSON) into the worker, worker api and starter, for histories written before payload encryption while they drain; false refuses them, so a workflow started or signalled around supportflow's starter and API (which seal) does not run"},
	{Name: "ZENDESK_URL", Help: "Zendesk API base URL (e.g. a stand-in); overrides ZENDESK_SUBDOMAIN"},
	{Name: "ZENDESK_SUBDOMAIN", Help: "Zendesk account subdomain (https://{subdomain}.zendesk.com)"},
	{Name: "ZENDESK_EMAIL", Help: "Zendesk agent email for API-token auth (required)"},
	{Name: "ZENDESK_API_TOKEN", Help: "Zendesk API token (required)", Secret: true},
	{Name: "ZENDESK_API_TOKEN_FILE", Help: "file holding ZENDESK_API_TOKEN instead (a mounted secret)"},
	{Name: "SUBSCRIPTIONS_URL", Help: "subscription service base URL (required)"},
	{Name: "SUBSCRIPTIONS_TOKEN", Help: "subscription service bearer token (required)", Secret: true},
	{Name: "SUBSCRIPTIONS_TOKEN_FILE", Help: "file holding SUBSCRIPTIONS_TOKEN instead (a mounted secret)"},
	{Name: "MODEL_BASE_URL", Default: "https://api.openai.com/v1", Help: "OpenAI-compatible chat-completions base URL (OpenAI, vLLM, Ollama, llama.cpp)"},
	{Name: "MODEL_API_KEY", Help: "model API key (optional for local servers)", Secret: true},
	{Name: "MODEL_API_KEY_FILE", Help: "file holding MODEL_API_KEY instead (a mounted secret)"},
	{Name: "MODEL_NAME", Default: "gpt-4o-mini", Help: "model that drafts replies"},
	{Name: "BIGQUERY_PROJECT", Help: "Google Cloud project that runs (and is billed for) the customer lookups (required)"},
	{Name: "BIGQUERY_DATASET", Help: "BigQuery dataset with the customers, orders and subscriptions tables (required)"},
	{Name: "BIGQUERY_LOCATION", Default: "US", Help: "BigQuery location of the dataset"},
	{Name: "BIGQUERY_ENDPOINT", Help: "BigQuery REST endpoint (e.g. a stand-in); empty means Google's, with Application Default Credentials"},
	{Name: "GOOGLE_APPLICATION_CREDENTIALS", Help: "path of the Google service account key file BigQuery authenticates with (Application Default Credentials, read by Google's client library: https://cloud.google.com/docs/authentication/application-default-credentials); unset: the attached service account, from the metadata server on Google Cloud"},
}, limitVars(), []Var{
	{Name: "SUPPORTFLOW_MODEL_PROMPT_TOKENS", Default: "100000", Help: "estimated prompt tokens a draft may send; a longer conversation keeps its first comment and the newest that fit (keep it under the model's context window less SUPPORTFLOW_MODEL_MAX_TOKENS)"},
	{Name: "SUPPORTFLOW_MODEL_MAX_TOKENS", Default: "4096", Help: "max_completion_tokens of a draft; an answer cut off there fails as ModelTruncated"},
	{Name: "SUPPORTFLOW_REPLY_STATUS", Default: "", Help: "status a drafted reply sets on the ticket with the reply (open, pending, hold or solved; pending is the usual choice); empty leaves the status"},
	{Name: "SUPPORTFLOW_REPLY_TAGS", Default: "", Help: "comma-separated tags a drafted reply adds to the ticket with the reply (lower case, no spaces)"},
	{Name: "SUPPORTFLOW_ENRICHMENT_MODE", Default: "shadow", Help: "shadow (write only supportflow's enrichment tables) or live (also a private note on the ticket)"},
	{Name: "SUPPORTFLOW_RECONCILE_START", Default: "24h", Help: "where a cold reconciler starts reading Zendesk's exports: an RFC 3339 time, or a duration before the first run"},
	{Name: "SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE", Default: "10", Help: "pace of the reconciler's incremental export requests (Zendesk allows 10 a minute per account)"},
	{Name: "SUPPORTFLOW_ACCOUNT", Default: "ZENDESK_SUBDOMAIN, or ZENDESK_URL's host", Help: "account the ledger keys actions under"},
	{Name: "SUPPORTFLOW_METRICS_ADDR", Default: ":9090", Help: "address of the Prometheus /metrics endpoint (empty: off)"},
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Help: "OTLP/gRPC collector for traces (host:port or URL); tracing is off when empty"},
	{Name: "SUPPORTFLOW_DRAIN_TIMEOUT", Default: "30s", Help: "how long a stopping worker lets running activities finish"},
	{Name: EnvDeploymentName, Help: "Worker Deployment Versioning: the deployment this worker belongs to (with TEMPORAL_WORKER_BUILD_ID; both or neither); empty runs unversioned (docs/versioning.md)"},
	{Name: EnvWorkerBuildID, Help: "Worker Deployment Versioning: this build's ID (e.g. the image tag or git commit); pinned workflows finish on the build that started them"},
	{Name: EnvDeploymentSetCurrent, Default: DeploymentSetCurrentIfNone, Help: "whether a versioned worker makes its build the deployment's current version once it polls: if-none (only when the deployment has none: the first deploy), always (each deploy takes new work at once), never (an operator ramps and promotes with `temporal worker deployment`)"},
	{Name: "SUPPORTFLOW_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
}, httpVars())

// Worker is the worker's configuration.
type Worker struct {
	DatabaseURL string
	// Temporal is how the worker connects to Temporal (address,
	// namespace, TLS, API key).
	Temporal           temporalconn.Settings
	TaskQueue          string
	ZendeskURL         string
	ZendeskSubdomain   string
	ZendeskEmail       string
	ZendeskAPIToken    string
	SubscriptionsURL   string
	SubscriptionsToken string
	ModelBaseURL       string
	ModelAPIKey        string
	ModelName          string
	BigQueryProject    string
	BigQueryDataset    string
	BigQueryLocation   string
	BigQueryEndpoint   string
	EnrichmentMode     string
	// PayloadKeys seal every payload the worker sends to Temporal.
	PayloadKeys *codec.Keyring
	// AdmitUnsealedPayloads lets the worker take payloads that are not
	// sealed (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS); false refuses them
	// with codec.ErrUnsealed.
	AdmitUnsealedPayloads bool
	// ReplyUpdate is the ticket update every drafted reply carries (nil:
	// none), from SUPPORTFLOW_REPLY_STATUS and SUPPORTFLOW_REPLY_TAGS.
	ReplyUpdate  *supportflow.TicketUpdate
	Account      string
	DrainTimeout time.Duration
	// Deployment is the worker's Worker Deployment Version (zero: the
	// worker is unversioned).
	Deployment   Deployment
	LogLevel     string
	MetricsAddr  string
	OTLPEndpoint string
	// HTTP are the metrics server's timeouts (SUPPORTFLOW_HTTP_*).
	HTTP      telemetry.HTTPTimeouts
	Durations policy.Durations
	// ReconcileFrom and ReconcileBackfill say where a cold reconciler
	// starts: a fixed time, else this long before its first run.
	ReconcileFrom      time.Time
	ReconcileBackfill  time.Duration
	ExportRequestsPerM int
	// PromptTokens and MaxCompletionTokens bound a draft's prompt
	// (estimated) and answer.
	PromptTokens        int
	MaxCompletionTokens int
	// Limits are each resource's fleet-wide rate and per-worker
	// concurrency (policy.Resources).
	Limits map[string]ResourceLimit
}

// ResourceLimit bounds the work on one rate-limited service.
type ResourceLimit struct {
	// PerMinute is the fleet-wide requests a minute.
	PerMinute int
	// Concurrency is how many of its activities one worker runs at once.
	Concurrency int
	// CallsPerActivity is how many requests one activity may make: the
	// queue's activity rate is PerMinute / 60 / CallsPerActivity.
	CallsPerActivity int
}

// ActivitiesPerSecond is the queue's server-enforced activity rate: the
// requests a minute spread over the minute, divided among an activity's
// calls, less a tenth, because the server's limiter lets a second's worth
// through at once and the service counts any window.
func (l ResourceLimit) ActivitiesPerSecond() float64 {
	return 0.9 * float64(l.PerMinute) / 60 / float64(max(1, l.CallsPerActivity))
}

// resourceLimits are each resource's defaults (in policy.Resources'
// order) and the help of its two variables, SUPPORTFLOW_{R}_REQUESTS_PER_MINUTE
// and SUPPORTFLOW_{R}_CONCURRENCY: Zendesk's Team plan (200 a minute,
// https://developer.zendesk.com/api-reference/introduction/rate-limits/),
// a model's usual first-tier RPM, and room for the others. calls is the
// most requests one activity makes: a Zendesk write reads the ticket, may
// search its audits and writes (a read: the ticket and its comments); the
// others make one.
var resourceLimits = []struct {
	resource                  string
	perMinute, concurrency    int
	calls                     int
	rateHelp, concurrencyHelp string
}{
	{policy.ResourceZendesk, 200, 8, 3,
		"Zendesk API requests a minute for the whole fleet (your plan's limit: Team 200, Professional 400, Enterprise 700); the zendesk queue's server-enforced activity rate is a third of it, an activity making up to three calls",
		"Zendesk activities one worker runs at once"},
	{policy.ResourceModel, 500, 4, 1,
		"model requests a minute for the whole fleet (the provider's RPM for the model)",
		"model calls one worker streams at once"},
	{policy.ResourceBigQuery, 600, 8, 1,
		"BigQuery lookups a minute for the whole fleet",
		"BigQuery lookups one worker runs at once"},
	{policy.ResourceSubscriptions, 600, 8, 1,
		"subscription-service cancellation activities a minute for the whole fleet",
		"cancellation activities one worker runs at once"},
}

// limitVar names a resource's variable: SUPPORTFLOW_{RESOURCE}_{what}.
func limitVar(resource, what string) string {
	return "SUPPORTFLOW_" + strings.ToUpper(resource) + "_" + what
}

// limitVars are the resource limits' variables, for Vars.
func limitVars() []Var {
	var vars []Var
	for _, r := range resourceLimits {
		vars = append(vars,
			Var{Name: limitVar(r.resource, "REQUESTS_PER_MINUTE"), Default: strconv.Itoa(r.perMinute), Help: r.rateHelp},
			Var{Name: limitVar(r.resource, "CONCURRENCY"), Default: strconv.Itoa(r.concurrency), Help: r.concurrencyHelp})
	}
	return vars
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("configuration")

// LoadWorker reads the worker's configuration. It reports every missing or
// malformed variable at once, by name; the value of a secret or URL is never
// put in an error.
func LoadWorker() (Worker, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v
		}
		return def
	}
	c := Worker{
		DatabaseURL:      get("DATABASE_URL", ""),
		TaskQueue:        get("SUPPORTFLOW_TASK_QUEUE", supportflow.TaskQueue),
		ZendeskURL:       get("ZENDESK_URL", ""),
		ZendeskSubdomain: get("ZENDESK_SUBDOMAIN", ""),
		ZendeskEmail:     get("ZENDESK_EMAIL", ""),
		SubscriptionsURL: get("SUBSCRIPTIONS_URL", ""),
		ModelBaseURL:     get("MODEL_BASE_URL", "https://api.openai.com/v1"),
		ModelName:        get("MODEL_NAME", "gpt-4o-mini"),
		BigQueryProject:  get("BIGQUERY_PROJECT", ""),
		BigQueryDataset:  get("BIGQUERY_DATASET", ""),
		BigQueryLocation: get("BIGQUERY_LOCATION", "US"),
		BigQueryEndpoint: get("BIGQUERY_ENDPOINT", ""),
		EnrichmentMode:   get("SUPPORTFLOW_ENRICHMENT_MODE", supportflow.EnrichmentShadow),
		Account:          get("SUPPORTFLOW_ACCOUNT", ""),
		LogLevel:         get("SUPPORTFLOW_LOG_LEVEL", "info"),
		MetricsAddr:      os.Getenv("SUPPORTFLOW_METRICS_ADDR"),
		OTLPEndpoint:     get("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	if _, set := os.LookupEnv("SUPPORTFLOW_METRICS_ADDR"); !set {
		c.MetricsAddr = ":9090"
	}
	var errs []error
	if t, err := TemporalSettings(); err != nil {
		errs = append(errs, err)
	} else {
		c.Temporal = t
	}
	for name, dst := range map[string]*string{"ZENDESK_API_TOKEN": &c.ZendeskAPIToken, "SUBSCRIPTIONS_TOKEN": &c.SubscriptionsToken, "MODEL_API_KEY": &c.ModelAPIKey} {
		v, err := SecretEnv(name)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = v
	}
	missing := func(name, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%w: %s is required", ErrConfig, name))
		}
	}
	missing("DATABASE_URL", c.DatabaseURL)
	missing("ZENDESK_EMAIL", c.ZendeskEmail)
	missing("ZENDESK_API_TOKEN", c.ZendeskAPIToken)
	missing("SUBSCRIPTIONS_URL", c.SubscriptionsURL)
	missing("SUBSCRIPTIONS_TOKEN", c.SubscriptionsToken)
	missing("BIGQUERY_PROJECT", c.BigQueryProject)
	missing("BIGQUERY_DATASET", c.BigQueryDataset)
	if c.EnrichmentMode != supportflow.EnrichmentShadow && c.EnrichmentMode != supportflow.EnrichmentLive {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_ENRICHMENT_MODE must be shadow or live", ErrConfig))
	}
	if c.ZendeskURL == "" && c.ZendeskSubdomain == "" {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_URL or ZENDESK_SUBDOMAIN is required", ErrConfig))
	}
	if u, err := url.Parse(c.ModelBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%w: MODEL_BASE_URL must be an http(s) URL", ErrConfig))
	}
	if c.Account == "" {
		c.Account = c.ZendeskSubdomain
		if c.Account == "" && c.ZendeskURL != "" {
			if u, err := url.Parse(c.ZendeskURL); err == nil {
				c.Account = u.Host
			}
		}
	}
	drain, err := time.ParseDuration(get("SUPPORTFLOW_DRAIN_TIMEOUT", "30s"))
	if err != nil || drain < 0 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_DRAIN_TIMEOUT must be a non-negative duration", ErrConfig))
	}
	c.DrainTimeout = drain
	c.Deployment = Deployment{Name: get(EnvDeploymentName, ""), BuildID: get(EnvWorkerBuildID, ""),
		SetCurrent: get(EnvDeploymentSetCurrent, DeploymentSetCurrentIfNone)}
	if (c.Deployment.Name == "") != (c.Deployment.BuildID == "") {
		errs = append(errs, fmt.Errorf("%w: set both %s and %s for a versioned worker, or neither", ErrConfig, EnvDeploymentName, EnvWorkerBuildID))
	}
	switch c.Deployment.SetCurrent {
	case DeploymentSetCurrentIfNone, DeploymentSetCurrentAlways, DeploymentSetCurrentNever:
	default:
		errs = append(errs, fmt.Errorf("%w: %s must be if-none, always or never", ErrConfig, EnvDeploymentSetCurrent))
	}
	start := get("SUPPORTFLOW_RECONCILE_START", "24h")
	if t, err := time.Parse(time.RFC3339, start); err == nil {
		c.ReconcileFrom = t
	} else if d, err := time.ParseDuration(start); err == nil && d > 0 {
		c.ReconcileBackfill = d
	} else {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_RECONCILE_START must be an RFC 3339 time or a positive duration", ErrConfig))
	}
	if n, err := strconv.Atoi(get("SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE", "10")); err != nil || n <= 0 || n > 600 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE must be 1-600", ErrConfig))
	} else {
		c.ExportRequestsPerM = n
	}
	type intVar struct {
		name, def string
		min, max  int
		into      *int
	}
	ints := []intVar{
		{"SUPPORTFLOW_MODEL_PROMPT_TOKENS", "100000", 1000, 10_000_000, &c.PromptTokens},
		{"SUPPORTFLOW_MODEL_MAX_TOKENS", "4096", 256, 1_000_000, &c.MaxCompletionTokens},
	}
	limits := map[string]*ResourceLimit{}
	for _, r := range resourceLimits {
		l := &ResourceLimit{CallsPerActivity: r.calls}
		limits[r.resource] = l
		ints = append(ints,
			intVar{limitVar(r.resource, "REQUESTS_PER_MINUTE"), strconv.Itoa(r.perMinute), 1, 1_000_000, &l.PerMinute},
			intVar{limitVar(r.resource, "CONCURRENCY"), strconv.Itoa(r.concurrency), 1, 10_000, &l.Concurrency})
	}
	for _, v := range ints {
		n, err := strconv.Atoi(get(v.name, v.def))
		if err != nil || n < v.min || n > v.max {
			errs = append(errs, fmt.Errorf("%w: %s must be a whole number from %d to %d", ErrConfig, v.name, v.min, v.max))
			continue
		}
		*v.into = n
	}
	c.Limits = map[string]ResourceLimit{}
	for r, l := range limits {
		c.Limits[r] = *l
	}
	c.ReplyUpdate, err = ReplyUpdate(get("SUPPORTFLOW_REPLY_STATUS", ""), get("SUPPORTFLOW_REPLY_TAGS", ""))
	if err != nil {
		errs = append(errs, err)
	}
	c.Durations, err = policy.FromEnv()
	if err != nil {
		errs = append(errs, err)
	}
	if c.HTTP, err = HTTPTimeouts(); err != nil {
		errs = append(errs, err)
	}
	if c.PayloadKeys, err = PayloadKeys(); err != nil {
		errs = append(errs, err)
	}
	if c.AdmitUnsealedPayloads, err = AdmitUnsealedPayloads(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// AdmitUnsealedPayloads reads SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS (false
// when unset): whether a process's data converter admits payloads that
// are not sealed (codec.WithAdmitUnsealed). The worker, worker api and
// starter read it.
func AdmitUnsealedPayloads() (bool, error) {
	return boolVar(codec.EnvAdmitUnsealed, false)
}

// boolVar reads a boolean variable: def when unset or empty, else true or
// false (also 1/0, t/f, TRUE/FALSE, as strconv.ParseBool spells them).
// Anything else is an error naming the variable.
func boolVar(name string, def bool) (bool, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%w: %s must be true or false", ErrConfig, name)
	}
	return b, nil
}

// PayloadKeys reads the payload keyring (SUPPORTFLOW_PAYLOAD_KEYS or
// SUPPORTFLOW_PAYLOAD_KEYS_FILE); every process that talks to Temporal
// needs it. The error names the variable, never a key.
func PayloadKeys() (*codec.Keyring, error) {
	k, err := codec.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return k, nil
}

// ReplyUpdate builds the ticket update drafted replies carry from the
// values of SUPPORTFLOW_REPLY_STATUS and SUPPORTFLOW_REPLY_TAGS: nil when
// both are empty; a status or tag Zendesk would not store as given is a
// configuration error naming the variable.
func ReplyUpdate(status, tags string) (*supportflow.TicketUpdate, error) {
	u := supportflow.TicketUpdate{Status: strings.TrimSpace(status)}
	u.Tags = splitList(tags)
	if u.Status == "" && len(u.Tags) == 0 {
		return nil, nil
	}
	if err := u.Validate(); err != nil {
		return nil, fmt.Errorf("%w: SUPPORTFLOW_REPLY_STATUS / SUPPORTFLOW_REPLY_TAGS: %v", ErrConfig, err)
	}
	return &u, nil
}

// PrintHelp writes every variable with its default and meaning.
func PrintHelp(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, v := range Vars {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, or(v.Default, "-"), v.Help)
	}
	for _, e := range policy.Env {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, e.Default, e.Help)
	}
	tw.Flush()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// NewLogger returns the structured JSON logger every binary uses.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// APIVars lists the variables `worker api` reads besides the connection
// settings it shares with the worker (DATABASE_URL, TEMPORAL_*,
// SUPPORTFLOW_TASK_QUEUE, SUPPORTFLOW_ACCOUNT or ZENDESK_URL/SUBDOMAIN,
// SUPPORTFLOW_LOG_LEVEL).
var APIVars = []Var{
	{Name: "SUPPORTFLOW_API_ADDR", Default: ":8080", Help: "address the HTTP API listens on"},
	{Name: EnvAPITokens, Help: "the API's bearer tokens, comma-separated NAME:ROLE[+ROLE...]:TOKEN: NAME (1-64 of A-Za-z0-9._-) is what decisions are recorded under; roles app (start and read drafts, events, actions), approver (approve, reject), operator (retry); TOKEN 16+ characters; this or SUPPORTFLOW_API_TOKENS_FILE is needed by worker api", Secret: true},
	{Name: EnvAPITokensFile, Help: "file with the API tokens instead, one NAME:ROLE[+ROLE...]:TOKEN a line, # comments (a mounted secret)"},
	{Name: "ZENDESK_WEBHOOK_SECRET", Help: "Zendesk webhook signing secret (needed by worker api)", Secret: true},
	{Name: "ZENDESK_WEBHOOK_SECRET_FILE", Help: "file holding ZENDESK_WEBHOOK_SECRET instead (a mounted secret)"},
	{Name: "ZENDESK_API_USER_ID", Help: "id of the Zendesk user whose API token supportflow writes with (GET /api/v2/users/me.json); its events start no lookup and supersede no draft (needed by worker api)"},
	{Name: "SUPPORTFLOW_WEBHOOK_RETRY_AFTER", Default: "10s", Help: "Retry-After of a webhook answered 503 (1-59 s: Zendesk retries only under 60 s)"},
	{Name: "SUPPORTFLOW_RELAY_INTERVAL", Default: "2s", Help: "how often undispatched ticket events are looked for when nothing wakes the relay"},
	{Name: "SUPPORTFLOW_CODEC_TOKENS", Help: "comma-separated bearer tokens (16+ characters) of the codec server at /codec/encode and /codec/decode, for the Web UI and temporal --codec-auth; unset: no codec server", Secret: true},
	{Name: "SUPPORTFLOW_CODEC_TOKENS_FILE", Help: "file holding SUPPORTFLOW_CODEC_TOKENS instead (a mounted secret)"},
	{Name: "SUPPORTFLOW_CODEC_CORS_ORIGINS", Help: "comma-separated browser origins allowed to call the codec server: the Web UI's (e.g. https://temporal.example.com)"},
	{Name: EnvMaxStreamsPerToken, Default: strconv.Itoa(api.DefaultMaxStreamsPerToken), Help: "event streams (GET /tickets/{id}/draft/events) one API token may hold open at once; the next is answered 429 with a Retry-After"},
	{Name: EnvSSEKeepAlive, Default: "15s", Help: "how often an event stream with nothing new sends a keep-alive comment (keep it under the idle timeout of every proxy in front of the API)"},
	{Name: codec.EnvAllowEncode, Default: "false", Help: "true also serves POST /codec/encode, which seals whatever payloads a codec token holder sends (the temporal CLI's start and signal with --codec-endpoint, the Web UI's start and signal forms); false answers it 403, so the codec server only decodes, which is all displaying histories needs"},
}

// API is the HTTP API's configuration.
type API struct {
	DatabaseURL string
	Temporal    temporalconn.Settings
	TaskQueue   string
	Account     string
	Addr        string
	// Tokens are the API's named bearer tokens with their roles.
	Tokens            []api.Token
	WebhookSecret     string
	ZendeskUserID     int64
	WebhookRetryAfter time.Duration
	RelayInterval     time.Duration
	// PayloadKeys seal the payloads the API sends and open the ones it
	// reads; the codec server uses them too.
	PayloadKeys *codec.Keyring
	// AdmitUnsealedPayloads lets the API's client read payloads that are
	// not sealed (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS); the codec server
	// decodes them whatever it says.
	AdmitUnsealedPayloads bool
	// CodecTokens and CodecOrigins configure the codec server (none
	// without tokens).
	CodecTokens  []string
	CodecOrigins []string
	// CodecAllowEncode makes the codec server serve /codec/encode
	// (SUPPORTFLOW_CODEC_ALLOW_ENCODE); false answers it 403.
	CodecAllowEncode bool

	LogLevel     string
	MetricsAddr  string
	OTLPEndpoint string

	// HTTP are the API's and its metrics server's timeouts
	// (SUPPORTFLOW_HTTP_*).
	HTTP telemetry.HTTPTimeouts
	// MaxStreamsPerToken caps one token's open event streams
	// (SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN).
	MaxStreamsPerToken int
	// SSEKeepAlive is how often an idle event stream sends a comment
	// (SUPPORTFLOW_API_SSE_KEEPALIVE).
	SSEKeepAlive time.Duration
}

// LoadAPI reads the API's configuration, reporting every problem by name
// and never a secret's value.
func LoadAPI() (API, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v
		}
		return def
	}
	c := API{
		DatabaseURL:  get("DATABASE_URL", ""),
		TaskQueue:    get("SUPPORTFLOW_TASK_QUEUE", supportflow.TaskQueue),
		Account:      accountFrom(get("SUPPORTFLOW_ACCOUNT", ""), get("ZENDESK_SUBDOMAIN", ""), get("ZENDESK_URL", "")),
		Addr:         get("SUPPORTFLOW_API_ADDR", ":8080"),
		LogLevel:     get("SUPPORTFLOW_LOG_LEVEL", "info"),
		MetricsAddr:  os.Getenv("SUPPORTFLOW_METRICS_ADDR"),
		OTLPEndpoint: get("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
	}
	if _, set := os.LookupEnv("SUPPORTFLOW_METRICS_ADDR"); !set {
		c.MetricsAddr = ":9090"
	}
	var errs []error
	if t, err := TemporalSettings(); err != nil {
		errs = append(errs, err)
	} else {
		c.Temporal = t
	}
	var err error
	if c.WebhookSecret, err = SecretEnv("ZENDESK_WEBHOOK_SECRET"); err != nil {
		errs = append(errs, err)
	}
	if c.Tokens, err = APITokens(os.Getenv); err != nil {
		errs = append(errs, err)
	}
	if c.DatabaseURL == "" {
		errs = append(errs, fmt.Errorf("%w: DATABASE_URL is required", ErrConfig))
	}
	if c.Account == "" {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_ACCOUNT (or ZENDESK_SUBDOMAIN/ZENDESK_URL) is required to name the ledger's account", ErrConfig))
	}
	if c.WebhookSecret == "" {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_WEBHOOK_SECRET is required", ErrConfig))
	}
	if v := get("ZENDESK_API_USER_ID", ""); v == "" {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_API_USER_ID is required (the id GET /api/v2/users/me.json answers for supportflow's API token)", ErrConfig))
	} else if id, err := strconv.ParseInt(v, 10, 64); err != nil || id <= 0 {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_API_USER_ID must be a positive integer", ErrConfig))
	} else {
		c.ZendeskUserID = id
	}
	if c.WebhookRetryAfter, err = time.ParseDuration(get("SUPPORTFLOW_WEBHOOK_RETRY_AFTER", "10s")); err != nil ||
		c.WebhookRetryAfter < time.Second || c.WebhookRetryAfter >= time.Minute {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_WEBHOOK_RETRY_AFTER must be a duration of 1-59 s", ErrConfig))
	}
	if c.RelayInterval, err = time.ParseDuration(get("SUPPORTFLOW_RELAY_INTERVAL", "2s")); err != nil || c.RelayInterval <= 0 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_RELAY_INTERVAL must be a positive duration", ErrConfig))
	}
	if c.PayloadKeys, err = PayloadKeys(); err != nil {
		errs = append(errs, err)
	}
	if c.AdmitUnsealedPayloads, err = AdmitUnsealedPayloads(); err != nil {
		errs = append(errs, err)
	}
	if c.CodecAllowEncode, err = boolVar(codec.EnvAllowEncode, false); err != nil {
		errs = append(errs, err)
	}
	codecTokens, err := SecretEnv("SUPPORTFLOW_CODEC_TOKENS")
	if err != nil {
		errs = append(errs, err)
	}
	c.CodecTokens = splitList(codecTokens)
	if err := shortToken("SUPPORTFLOW_CODEC_TOKENS", c.CodecTokens); err != nil {
		errs = append(errs, err)
	}
	if c.HTTP, err = HTTPTimeouts(); err != nil {
		errs = append(errs, err)
	}
	if n, err := strconv.Atoi(get(EnvMaxStreamsPerToken, strconv.Itoa(api.DefaultMaxStreamsPerToken))); err != nil || n < 1 || n > 10_000 {
		errs = append(errs, fmt.Errorf("%w: %s must be a whole number from 1 to 10000", ErrConfig, EnvMaxStreamsPerToken))
	} else {
		c.MaxStreamsPerToken = n
	}
	if c.SSEKeepAlive, err = time.ParseDuration(get(EnvSSEKeepAlive, "15s")); err != nil || c.SSEKeepAlive <= 0 {
		errs = append(errs, fmt.Errorf("%w: %s must be a positive duration", ErrConfig, EnvSSEKeepAlive))
	}
	c.CodecOrigins = splitList(os.Getenv("SUPPORTFLOW_CODEC_CORS_ORIGINS"))
	for _, o := range c.CodecOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_CODEC_CORS_ORIGINS: %q is not an origin (scheme://host[:port], no path)", ErrConfig, o))
		}
	}
	return c, errors.Join(errs...)
}

// The API tokens' variables.
const (
	EnvAPITokens     = "SUPPORTFLOW_API_TOKENS"
	EnvAPITokensFile = "SUPPORTFLOW_API_TOKENS_FILE"
)

// APITokens reads the API's tokens from SUPPORTFLOW_API_TOKENS
// (comma-separated) or the file SUPPORTFLOW_API_TOKENS_FILE names (one a
// line; blank lines and lines starting with # are skipped), each
// NAME:ROLE[+ROLE...]:TOKEN (api.ParseToken). Neither set, both set, an
// unreadable file, a malformed entry, a name or token used twice: an error
// naming the variable and the entry (its position, and its name once it
// parsed), never a token.
func APITokens(getenv func(string) string) ([]api.Token, error) {
	inline, file := strings.TrimSpace(getenv(EnvAPITokens)), strings.TrimSpace(getenv(EnvAPITokensFile))
	type entry struct{ where, text string }
	var entries []entry
	var source string
	switch {
	case inline != "" && file != "":
		return nil, fmt.Errorf("%w: set %s or %s, not both", ErrConfig, EnvAPITokens, EnvAPITokensFile)
	case inline != "":
		source = EnvAPITokens
		for i, e := range splitList(inline) {
			entries = append(entries, entry{fmt.Sprintf("entry %d", i+1), e})
		}
	case file != "":
		source = EnvAPITokensFile + " (" + file + ")"
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, EnvAPITokensFile, err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				entries = append(entries, entry{fmt.Sprintf("line %d", i+1), line})
			}
		}
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: %s (or %s) is required: comma-separated %s, e.g. helpdesk-app:app:$(openssl rand -hex 24)",
			ErrConfig, EnvAPITokens, EnvAPITokensFile, api.TokenFormat)
	}
	var tokens []api.Token
	var errs []error
	for _, e := range entries {
		t, err := api.ParseToken(e.text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %s: %w", ErrConfig, source, e.where, err))
			continue
		}
		tokens = append(tokens, t)
	}
	if len(errs) == 0 {
		// Each entry parsed: what is left is a name or token used twice.
		if err := api.CheckTokens(tokens); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrConfig, source, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return tokens, nil
}

// shortToken refuses a list of bearer tokens (the variable name) with one
// shorter than 16 characters, never saying which.
func shortToken(name string, tokens []string) error {
	for _, t := range tokens {
		if len(t) < 16 {
			return fmt.Errorf("%w: every %s token must be at least 16 characters", ErrConfig, name)
		}
	}
	return nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// accountFrom is the ledger account: explicit, else the Zendesk subdomain,
// else the Zendesk URL's host (as the worker derives it).
func accountFrom(account, subdomain, zendeskURL string) string {
	if account != "" {
		return account
	}
	if subdomain != "" {
		return subdomain
	}
	if u, err := url.Parse(zendeskURL); err == nil && zendeskURL != "" {
		return u.Host
	}
	return ""
}

// GatewayVars lists what `worker codec-gateway` reads.
var GatewayVars = slices.Concat([]Var{
	{Name: "SUPPORTFLOW_CODEC_UPSTREAM", Help: "URL of the worker api whose /codec the gateway forwards to, e.g. http://api:8000 (required)"},
	{Name: "SUPPORTFLOW_CODEC_TOKENS", Help: "the codec token the gateway sends (the first of the list; required)", Secret: true},
	{Name: "SUPPORTFLOW_CODEC_TOKENS_FILE", Help: "file holding SUPPORTFLOW_CODEC_TOKENS instead (a mounted secret)"},
	{Name: "SUPPORTFLOW_CODEC_GATEWAY_ADDR", Default: "127.0.0.1:8090", Help: "address the gateway listens on: only where the Web UI itself may be reached, since whoever reaches it reads payloads"},
	{Name: "SUPPORTFLOW_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
}, httpVars())

// Gateway is the codec gateway's configuration: where it listens, the
// codec server it forwards to, and the token it adds.
type Gateway struct {
	Addr     string
	Upstream *url.URL
	Token    string
	LogLevel string
	// HTTP are the gateway's timeouts (SUPPORTFLOW_HTTP_*).
	HTTP telemetry.HTTPTimeouts
}

// LoadGateway reads the codec gateway's configuration, naming every
// problem and never the token.
func LoadGateway() (Gateway, error) {
	g := Gateway{Addr: strings.TrimSpace(os.Getenv("SUPPORTFLOW_CODEC_GATEWAY_ADDR")), LogLevel: strings.TrimSpace(os.Getenv("SUPPORTFLOW_LOG_LEVEL"))}
	if g.Addr == "" {
		g.Addr = "127.0.0.1:8090"
	}
	var errs []error
	raw := strings.TrimSpace(os.Getenv("SUPPORTFLOW_CODEC_UPSTREAM"))
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_CODEC_UPSTREAM must be the http(s) URL of worker api, without a path (the gateway keeps the /codec of the request)", ErrConfig))
	} else {
		g.Upstream = u
	}
	raw, err := SecretEnv("SUPPORTFLOW_CODEC_TOKENS")
	if err != nil {
		errs = append(errs, err)
	}
	if tokens := splitList(raw); len(tokens) == 0 && err == nil {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_CODEC_TOKENS is required (a token worker api accepts)", ErrConfig))
	} else if len(tokens) > 0 {
		g.Token = tokens[0]
	}
	if g.HTTP, err = HTTPTimeouts(); err != nil {
		errs = append(errs, err)
	}
	return g, errors.Join(errs...)
}

// PrintAPIHelp writes the API's own variables.
func PrintAPIHelp(w io.Writer) { PrintVars(w, APIVars) }

// PrintVars writes vars with their defaults and meanings.
func PrintVars(w io.Writer, vars []Var) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, v := range vars {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, or(v.Default, "-"), v.Help)
	}
	tw.Flush()
}

// The API's event stream settings.
const (
	EnvMaxStreamsPerToken = "SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN"
	EnvSSEKeepAlive       = "SUPPORTFLOW_API_SSE_KEEPALIVE"
)

// httpTimeoutVars are the timeouts of every HTTP server supportflow runs
// (the API, the codec gateway, the metrics endpoint), their defaults
// telemetry.DefaultHTTPTimeouts'; what each bounds is net/http's
// (https://pkg.go.dev/net/http#Server).
var httpTimeoutVars = []struct {
	Var
	into func(*telemetry.HTTPTimeouts) *time.Duration
}{
	{Var{Name: "SUPPORTFLOW_HTTP_READ_HEADER_TIMEOUT", Default: telemetry.DefaultHTTPTimeouts.ReadHeader.String(), Help: "how long an HTTP server (API, codec gateway, metrics) waits for a request's headers"},
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.ReadHeader }},
	{Var{Name: "SUPPORTFLOW_HTTP_READ_TIMEOUT", Default: telemetry.DefaultHTTPTimeouts.Read.String(), Help: "how long an HTTP server waits for a whole request, headers and body (the API bounds a body's read by it too)"},
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Read }},
	{Var{Name: "SUPPORTFLOW_HTTP_WRITE_TIMEOUT", Default: telemetry.DefaultHTTPTimeouts.Write.String(), Help: "how long an HTTP server has to answer a request, from its headers; an event stream gets it anew for every event it writes"},
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Write }},
	{Var{Name: "SUPPORTFLOW_HTTP_IDLE_TIMEOUT", Default: telemetry.DefaultHTTPTimeouts.Idle.String(), Help: "how long an HTTP server keeps an idle keep-alive connection open"},
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Idle }},
}

// httpVars are httpTimeoutVars' documentation, for Vars and GatewayVars.
func httpVars() []Var {
	var vars []Var
	for _, v := range httpTimeoutVars {
		vars = append(vars, v.Var)
	}
	return vars
}

// HTTPTimeouts reads the HTTP servers' timeouts (SUPPORTFLOW_HTTP_*),
// each a positive duration, defaults where unset; every malformed one is
// reported by name.
func HTTPTimeouts() (telemetry.HTTPTimeouts, error) {
	var t telemetry.HTTPTimeouts
	var errs []error
	for _, v := range httpTimeoutVars {
		raw := strings.TrimSpace(os.Getenv(v.Name))
		if raw == "" {
			raw = v.Default
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%w: %s must be a positive duration", ErrConfig, v.Name))
			continue
		}
		*v.into(&t) = d
	}
	if len(errs) == 0 {
		if err := t.Check(); err != nil {
			errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_HTTP_READ_HEADER_TIMEOUT / SUPPORTFLOW_HTTP_READ_TIMEOUT: %v", ErrConfig, err))
		}
	}
	return t, errors.Join(errs...)
}

// Worker Deployment Versioning settings. The first two are the names
// Temporal's worker controller for Kubernetes gives its workers.
// https://docs.temporal.io/production-deployment/worker-deployments/worker-versioning
const (
	EnvDeploymentName       = "TEMPORAL_DEPLOYMENT_NAME"
	EnvWorkerBuildID        = "TEMPORAL_WORKER_BUILD_ID"
	EnvDeploymentSetCurrent = "SUPPORTFLOW_DEPLOYMENT_SET_CURRENT"

	DeploymentSetCurrentIfNone = "if-none"
	DeploymentSetCurrentAlways = "always"
	DeploymentSetCurrentNever  = "never"
)

// Deployment is a versioned worker's place in a Worker Deployment.
type Deployment struct {
	Name, BuildID string
	// SetCurrent is if-none, always or never (EnvDeploymentSetCurrent).
	SetCurrent string
}

// Versioned reports whether the worker uses Worker Deployment Versioning.
func (d Deployment) Versioned() bool { return d.Name != "" && d.BuildID != "" }

// SecretEnv reads a secret from the environment variable name or, when
// name+"_FILE" is set, from the file it names (a mounted compose or
// Kubernetes secret; surrounding white space, such as the trailing newline
// an editor leaves, is dropped). Setting both, an unreadable file and an
// empty file are errors naming the variable, never the value.
func SecretEnv(name string) (string, error) {
	fileVar := name + "_FILE"
	path := strings.TrimSpace(os.Getenv(fileVar))
	if path == "" {
		return os.Getenv(name), nil
	}
	if os.Getenv(name) != "" {
		return "", fmt.Errorf("%w: set %s or %s, not both", ErrConfig, name, fileVar)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: cannot read the file: %v", ErrConfig, fileVar, errors.Unwrap(err))
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%w: %s: the file is empty", ErrConfig, fileVar)
	}
	return v, nil
}
