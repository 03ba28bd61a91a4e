// Package config reads supportflow's settings from the environment. Every
// setting is an environment variable written once, in the spec (spec.go):
// its name, the programs that read it, its default (taken from the code
// that owns the value), whether it is a secret with a _FILE variant, and
// its meaning. The loaders (LoadWorkerFrom, LoadAPIFrom, LoadGatewayFrom,
// ...) read an injected Env and take their defaults from the spec; --help
// and docs/configuration.md are generated from it. Secrets are read here
// and never logged or put in an error.
package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
)

// Env reads one environment variable and whether it is set, as
// os.LookupEnv does (OSEnv); the loaders read nothing else, so a test
// passes a map (MapEnv). A variable set to an empty or blank value counts
// as unset, except SUPPORTFLOW_METRICS_ADDR, where empty turns the
// endpoint off: that is why an Env reports whether a variable is set.
type Env func(name string) (value string, set bool)

// MapEnv is an Env over vars.
func MapEnv(vars map[string]string) Env {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// Getenv is env as a getenv (unset reads as "").
func (env Env) Getenv(name string) string {
	v, _ := env(name)
	return v
}

// get is the variable's value, trimmed, or the spec's default when it is
// unset or blank.
func (env Env) get(name string) string {
	if v := strings.TrimSpace(env.Getenv(name)); v != "" {
		return v
	}
	return defaultOf(name)
}

// TemporalSettings reads the Temporal connection from the environment
// (temporalconn.FromEnv), its errors wrapping ErrConfig.
func TemporalSettings() (temporalconn.Settings, error) { return TemporalSettingsFrom(OSEnv) }

// TemporalSettingsFrom is TemporalSettings reading env.
func TemporalSettingsFrom(env Env) (temporalconn.Settings, error) {
	s, err := temporalconn.FromEnv(env.Getenv)
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return s, nil
}

// Worker is the worker's configuration.
type Worker struct {
	DatabaseURL string
	// Temporal is how the worker connects to Temporal (address,
	// namespace, TLS, API key).
	Temporal  temporalconn.Settings
	TaskQueue string
	// IDPrefix is the account's prefix on workflow and schedule IDs
	// (SUPPORTFLOW_ID_PREFIX; "" for none): supportflow.IDs{Prefix: IDPrefix}.
	IDPrefix           string
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

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("configuration")

// LoadWorker reads the worker's configuration from the process's
// environment (LoadWorkerFrom(OSEnv)).
func LoadWorker() (Worker, error) { return LoadWorkerFrom(OSEnv) }

// LoadWorkerFrom reads the worker's configuration from env, each unset
// variable taking the spec's default. It reports every missing or
// malformed variable at once, by name; the value of a secret or URL is
// never put in an error.
func LoadWorkerFrom(env Env) (Worker, error) {
	get := env.get
	c := Worker{
		DatabaseURL:      get("DATABASE_URL"),
		TaskQueue:        get("SUPPORTFLOW_TASK_QUEUE"),
		ZendeskURL:       get("ZENDESK_URL"),
		ZendeskSubdomain: get("ZENDESK_SUBDOMAIN"),
		ZendeskEmail:     get("ZENDESK_EMAIL"),
		SubscriptionsURL: get("SUBSCRIPTIONS_URL"),
		ModelBaseURL:     get("MODEL_BASE_URL"),
		ModelName:        get("MODEL_NAME"),
		BigQueryProject:  get("BIGQUERY_PROJECT"),
		BigQueryDataset:  get("BIGQUERY_DATASET"),
		BigQueryLocation: get("BIGQUERY_LOCATION"),
		BigQueryEndpoint: get("BIGQUERY_ENDPOINT"),
		EnrichmentMode:   get("SUPPORTFLOW_ENRICHMENT_MODE"),
		Account:          get("SUPPORTFLOW_ACCOUNT"),
		LogLevel:         get("SUPPORTFLOW_LOG_LEVEL"),
		MetricsAddr:      metricsAddr(env),
		OTLPEndpoint:     get("OTEL_EXPORTER_OTLP_ENDPOINT"),
	}
	var errs []error
	if t, err := TemporalSettingsFrom(env); err != nil {
		errs = append(errs, err)
	} else {
		c.Temporal = t
	}
	if p, err := IDPrefixFrom(env); err != nil {
		errs = append(errs, err)
	} else {
		c.IDPrefix = p
	}
	for _, s := range []struct {
		name string
		dst  *string
	}{{"ZENDESK_API_TOKEN", &c.ZendeskAPIToken}, {"SUBSCRIPTIONS_TOKEN", &c.SubscriptionsToken}, {"MODEL_API_KEY", &c.ModelAPIKey}} {
		v, err := secretFrom(env, s.name)
		if err != nil {
			errs = append(errs, err)
		}
		*s.dst = v
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
	drain, err := time.ParseDuration(get("SUPPORTFLOW_DRAIN_TIMEOUT"))
	if err != nil || drain < 0 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_DRAIN_TIMEOUT must be a non-negative duration", ErrConfig))
	}
	c.DrainTimeout = drain
	c.Deployment = Deployment{Name: get(EnvDeploymentName), BuildID: get(EnvWorkerBuildID), SetCurrent: get(EnvDeploymentSetCurrent)}
	if (c.Deployment.Name == "") != (c.Deployment.BuildID == "") {
		errs = append(errs, fmt.Errorf("%w: set both %s and %s for a versioned worker, or neither", ErrConfig, EnvDeploymentName, EnvWorkerBuildID))
	}
	switch c.Deployment.SetCurrent {
	case DeploymentSetCurrentIfNone, DeploymentSetCurrentAlways, DeploymentSetCurrentNever:
	default:
		errs = append(errs, fmt.Errorf("%w: %s must be if-none, always or never", ErrConfig, EnvDeploymentSetCurrent))
	}
	start := get("SUPPORTFLOW_RECONCILE_START")
	if t, err := time.Parse(time.RFC3339, start); err == nil {
		c.ReconcileFrom = t
	} else if d, err := time.ParseDuration(start); err == nil && d > 0 {
		c.ReconcileBackfill = d
	} else {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_RECONCILE_START must be an RFC 3339 time or a positive duration", ErrConfig))
	}
	if n, err := strconv.Atoi(get("SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE")); err != nil || n <= 0 || n > 600 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE must be 1-600", ErrConfig))
	} else {
		c.ExportRequestsPerM = n
	}
	type intVar struct {
		name     string
		min, max int
		into     *int
	}
	ints := []intVar{
		{"SUPPORTFLOW_MODEL_PROMPT_TOKENS", 1000, 10_000_000, &c.PromptTokens},
		{"SUPPORTFLOW_MODEL_MAX_TOKENS", 256, 1_000_000, &c.MaxCompletionTokens},
	}
	limits := map[string]*ResourceLimit{}
	for _, r := range resourceLimits {
		l := &ResourceLimit{CallsPerActivity: r.calls}
		limits[r.resource] = l
		ints = append(ints,
			intVar{limitVar(r.resource, "REQUESTS_PER_MINUTE"), 1, 1_000_000, &l.PerMinute},
			intVar{limitVar(r.resource, "CONCURRENCY"), 1, 10_000, &l.Concurrency})
	}
	for _, v := range ints {
		n, err := strconv.Atoi(get(v.name))
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
	c.ReplyUpdate, err = ReplyUpdate(get("SUPPORTFLOW_REPLY_STATUS"), get("SUPPORTFLOW_REPLY_TAGS"))
	if err != nil {
		errs = append(errs, err)
	}
	c.Durations, err = durationsFrom(env)
	if err != nil {
		errs = append(errs, err)
	}
	if c.HTTP, err = HTTPTimeoutsFrom(env); err != nil {
		errs = append(errs, err)
	}
	if c.PayloadKeys, err = PayloadKeysFrom(env); err != nil {
		errs = append(errs, err)
	}
	if c.AdmitUnsealedPayloads, err = AdmitUnsealedPayloadsFrom(env); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// metricsAddr is SUPPORTFLOW_METRICS_ADDR, as given (empty: no metrics
// endpoint), or the spec's default when unset.
func metricsAddr(env Env) string {
	if v, set := env(EnvMetricsAddr); set {
		return v
	}
	return defaultOf(EnvMetricsAddr)
}

// durationsFrom reads policy's durations (policy.Env) from env as
// policy.FromEnv reads them from the process's environment: unset or
// empty means policy's default; a value that does not parse is an error
// naming the variable; the result is validated.
func durationsFrom(env Env) (policy.Durations, error) {
	var d policy.Durations
	fields := reflect.ValueOf(&d).Elem()
	for _, e := range policy.Env {
		v := env.Getenv(e.Name)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return policy.Durations{}, fmt.Errorf("%w: %s=%q: %v", policy.ErrInvalidDurations, e.Name, v, err)
		}
		fields.Field(durationFields[e.Name]).SetInt(int64(parsed))
	}
	d = d.Fill()
	return d, d.Validate()
}

// AdmitUnsealedPayloads reads SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS (false
// when unset): whether a process's data converter admits payloads that
// are not sealed (codec.WithAdmitUnsealed). The worker, supportflow-api and
// starter read it.
func AdmitUnsealedPayloads() (bool, error) { return AdmitUnsealedPayloadsFrom(OSEnv) }

// AdmitUnsealedPayloadsFrom is AdmitUnsealedPayloads reading env.
func AdmitUnsealedPayloadsFrom(env Env) (bool, error) { return boolVar(env, codec.EnvAdmitUnsealed) }

// boolVar reads a boolean variable: the spec's default when unset or
// empty, else true or false (also 1/0, t/f, TRUE/FALSE, as
// strconv.ParseBool spells them). Anything else is an error naming the
// variable.
func boolVar(env Env, name string) (bool, error) {
	def, _ := strconv.ParseBool(defaultOf(name))
	v := strings.TrimSpace(env.Getenv(name))
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
func PayloadKeys() (*codec.Keyring, error) { return PayloadKeysFrom(OSEnv) }

// PayloadKeysFrom is PayloadKeys reading env.
func PayloadKeysFrom(env Env) (*codec.Keyring, error) {
	k, err := codec.FromEnv(env.Getenv)
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

// API is the HTTP API's configuration.
type API struct {
	DatabaseURL string
	Temporal    temporalconn.Settings
	TaskQueue   string
	// IDPrefix is the account's prefix on workflow and schedule IDs
	// (SUPPORTFLOW_ID_PREFIX), as the worker's.
	IDPrefix string
	Account  string
	Addr     string
	// Tokens are the API's named bearer tokens with their roles.
	Tokens        []api.Token
	WebhookSecret string
	// PreviousWebhookSecret is also accepted during a rotation
	// (ZENDESK_WEBHOOK_SECRET_PREVIOUS); empty otherwise.
	PreviousWebhookSecret string
	ZendeskUserID         int64
	WebhookRetryAfter     time.Duration
	RelayInterval         time.Duration
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

// LoadAPI reads the API's configuration from the process's environment
// (LoadAPIFrom(OSEnv)).
func LoadAPI() (API, error) { return LoadAPIFrom(OSEnv) }

// LoadAPIFrom reads the API's configuration from env, each unset variable
// taking the spec's default, reporting every problem by name and never a
// secret's value.
func LoadAPIFrom(env Env) (API, error) {
	get := env.get
	c := API{
		DatabaseURL:  get("DATABASE_URL"),
		TaskQueue:    get("SUPPORTFLOW_TASK_QUEUE"),
		Account:      accountFrom(get("SUPPORTFLOW_ACCOUNT"), get("ZENDESK_SUBDOMAIN"), get("ZENDESK_URL")),
		Addr:         get("SUPPORTFLOW_API_ADDR"),
		LogLevel:     get("SUPPORTFLOW_LOG_LEVEL"),
		MetricsAddr:  metricsAddr(env),
		OTLPEndpoint: get("OTEL_EXPORTER_OTLP_ENDPOINT"),
	}
	var errs []error
	if t, err := TemporalSettingsFrom(env); err != nil {
		errs = append(errs, err)
	} else {
		c.Temporal = t
	}
	if p, err := IDPrefixFrom(env); err != nil {
		errs = append(errs, err)
	} else {
		c.IDPrefix = p
	}
	var err error
	if c.WebhookSecret, err = secretFrom(env, "ZENDESK_WEBHOOK_SECRET"); err != nil {
		errs = append(errs, err)
	}
	if c.PreviousWebhookSecret, err = secretFrom(env, "ZENDESK_WEBHOOK_SECRET_PREVIOUS"); err != nil {
		errs = append(errs, err)
	}
	if c.Tokens, err = APITokens(env.Getenv); err != nil {
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
	if v := get("ZENDESK_API_USER_ID"); v == "" {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_API_USER_ID is required (the id GET /api/v2/users/me.json answers for supportflow's API token)", ErrConfig))
	} else if id, err := strconv.ParseInt(v, 10, 64); err != nil || id <= 0 {
		errs = append(errs, fmt.Errorf("%w: ZENDESK_API_USER_ID must be a positive integer", ErrConfig))
	} else {
		c.ZendeskUserID = id
	}
	if c.WebhookRetryAfter, err = time.ParseDuration(get("SUPPORTFLOW_WEBHOOK_RETRY_AFTER")); err != nil ||
		c.WebhookRetryAfter < time.Second || c.WebhookRetryAfter >= time.Minute {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_WEBHOOK_RETRY_AFTER must be a duration of 1-59 s", ErrConfig))
	}
	if c.RelayInterval, err = time.ParseDuration(get("SUPPORTFLOW_RELAY_INTERVAL")); err != nil || c.RelayInterval <= 0 {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_RELAY_INTERVAL must be a positive duration", ErrConfig))
	}
	if c.PayloadKeys, err = PayloadKeysFrom(env); err != nil {
		errs = append(errs, err)
	}
	if c.AdmitUnsealedPayloads, err = AdmitUnsealedPayloadsFrom(env); err != nil {
		errs = append(errs, err)
	}
	if c.CodecAllowEncode, err = boolVar(env, codec.EnvAllowEncode); err != nil {
		errs = append(errs, err)
	}
	codecTokens, err := secretFrom(env, "SUPPORTFLOW_CODEC_TOKENS")
	if err != nil {
		errs = append(errs, err)
	}
	c.CodecTokens = splitList(codecTokens)
	if err := shortToken("SUPPORTFLOW_CODEC_TOKENS", c.CodecTokens); err != nil {
		errs = append(errs, err)
	}
	if c.HTTP, err = HTTPTimeoutsFrom(env); err != nil {
		errs = append(errs, err)
	}
	if n, err := strconv.Atoi(get(EnvMaxStreamsPerToken)); err != nil || n < 1 || n > 10_000 {
		errs = append(errs, fmt.Errorf("%w: %s must be a whole number from 1 to 10000", ErrConfig, EnvMaxStreamsPerToken))
	} else {
		c.MaxStreamsPerToken = n
	}
	if c.SSEKeepAlive, err = time.ParseDuration(get(EnvSSEKeepAlive)); err != nil || c.SSEKeepAlive <= 0 {
		errs = append(errs, fmt.Errorf("%w: %s must be a positive duration", ErrConfig, EnvSSEKeepAlive))
	}
	c.CodecOrigins = splitList(env.Getenv("SUPPORTFLOW_CODEC_CORS_ORIGINS"))
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

// EnvIDPrefix is the account's prefix on workflow and schedule IDs.
const EnvIDPrefix = "SUPPORTFLOW_ID_PREFIX"

// IDPrefixFrom reads SUPPORTFLOW_ID_PREFIX: "" (unset) for none, else a
// safe token (supportflow.ValidateIDPrefix); anything else is refused, so
// a typo never starts an account under IDs nothing else looks at.
func IDPrefixFrom(env Env) (string, error) {
	p := env.Getenv(EnvIDPrefix)
	if err := supportflow.ValidateIDPrefix(p); err != nil {
		return "", fmt.Errorf("%w: %s must be empty or 1-40 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit", ErrConfig, EnvIDPrefix)
	}
	return p, nil
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

// LoadGateway reads the codec gateway's configuration from the process's
// environment (LoadGatewayFrom(OSEnv)).
func LoadGateway() (Gateway, error) { return LoadGatewayFrom(OSEnv) }

// LoadGatewayFrom reads the codec gateway's configuration from env, naming
// every problem and never the token.
func LoadGatewayFrom(env Env) (Gateway, error) {
	g := Gateway{Addr: env.get("SUPPORTFLOW_CODEC_GATEWAY_ADDR"), LogLevel: env.get("SUPPORTFLOW_LOG_LEVEL")}
	var errs []error
	raw := env.get("SUPPORTFLOW_CODEC_UPSTREAM")
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_CODEC_UPSTREAM must be the http(s) URL of supportflow-api, without a path (the gateway keeps the /codec of the request)", ErrConfig))
	} else {
		g.Upstream = u
	}
	raw, err := secretFrom(env, "SUPPORTFLOW_CODEC_TOKENS")
	if err != nil {
		errs = append(errs, err)
	}
	if tokens := splitList(raw); len(tokens) == 0 && err == nil {
		errs = append(errs, fmt.Errorf("%w: SUPPORTFLOW_CODEC_TOKENS is required (a token supportflow-api accepts)", ErrConfig))
	} else if len(tokens) > 0 {
		g.Token = tokens[0]
	}
	if g.HTTP, err = HTTPTimeoutsFrom(env); err != nil {
		errs = append(errs, err)
	}
	return g, errors.Join(errs...)
}

// The API's event stream settings.
const (
	EnvMaxStreamsPerToken = "SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN"
	EnvSSEKeepAlive       = "SUPPORTFLOW_API_SSE_KEEPALIVE"
)

// httpTimeoutVars are the timeouts of every HTTP server supportflow runs
// (the API, the codec gateway, the metrics endpoint), each with the field
// of telemetry.HTTPTimeouts it sets; their defaults are
// telemetry.DefaultHTTPTimeouts' (httpSettings).
var httpTimeoutVars = []struct {
	name, help string
	into       func(*telemetry.HTTPTimeouts) *time.Duration
}{
	{"SUPPORTFLOW_HTTP_READ_HEADER_TIMEOUT", "how long an HTTP server (API, codec gateway, metrics) waits for a request's headers",
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.ReadHeader }},
	{"SUPPORTFLOW_HTTP_READ_TIMEOUT", "how long an HTTP server waits for a whole request, headers and body (the API bounds a body's read by it too)",
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Read }},
	{"SUPPORTFLOW_HTTP_WRITE_TIMEOUT", "how long an HTTP server has to answer a request, from its headers; an event stream gets it anew for every event it writes",
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Write }},
	{"SUPPORTFLOW_HTTP_IDLE_TIMEOUT", "how long an HTTP server keeps an idle keep-alive connection open",
		func(t *telemetry.HTTPTimeouts) *time.Duration { return &t.Idle }},
}

// HTTPTimeouts reads the HTTP servers' timeouts (SUPPORTFLOW_HTTP_*) from
// the process's environment (HTTPTimeoutsFrom(OSEnv)).
func HTTPTimeouts() (telemetry.HTTPTimeouts, error) { return HTTPTimeoutsFrom(OSEnv) }

// HTTPTimeoutsFrom reads the HTTP servers' timeouts from env, each a
// positive duration, the spec's defaults where unset; every malformed one
// is reported by name.
func HTTPTimeoutsFrom(env Env) (telemetry.HTTPTimeouts, error) {
	var t telemetry.HTTPTimeouts
	var errs []error
	for _, v := range httpTimeoutVars {
		d, err := time.ParseDuration(env.get(v.name))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%w: %s must be a positive duration", ErrConfig, v.name))
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
func SecretEnv(name string) (string, error) { return secretFrom(OSEnv, name) }

// secretFrom is SecretEnv reading env.
func secretFrom(env Env, name string) (string, error) {
	fileVar := name + "_FILE"
	path := strings.TrimSpace(env.Getenv(fileVar))
	if path == "" {
		return env.Getenv(name), nil
	}
	if env.Getenv(name) != "" {
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
