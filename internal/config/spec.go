package config

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
)

//go:generate go test -run TestConfig_DocsMatchTheSpec -update

// Program is a supportflow program that reads settings.
type Program string

// The programs.
const (
	// ProgramWorker is `worker`, the Temporal worker.
	ProgramWorker Program = "worker"
	// ProgramAPI is `supportflow-api`: the HTTP API, the Zendesk webhook and
	// the codec server.
	ProgramAPI Program = "api"
	// ProgramGateway is `codec-gateway`, which lets a Web UI
	// without sign-in decode through the API's codec server.
	ProgramGateway Program = "gateway"
	// ProgramStarter is `starter`, the operator command.
	ProgramStarter Program = "starter"
)

// Programs are every program, in the order the docs list them.
var Programs = []Program{ProgramWorker, ProgramAPI, ProgramGateway, ProgramStarter}

// Command is how the program is run.
func (p Program) Command() string {
	switch p {
	case ProgramAPI:
		return "supportflow-api"
	case ProgramGateway:
		return "codec-gateway"
	}
	return string(p)
}

// Setting is one environment variable: the one place its name, the
// programs that read it, its default and its meaning are written. The
// loaders take their defaults from it; --help and docs/configuration.md
// are generated from it.
type Setting struct {
	Name string
	// Programs read it.
	Programs []Program
	// Default is the value a loader uses when the variable is unset or
	// blank ("": none). It is taken from the code that owns the value
	// (policy.Defaults, telemetry.DefaultHTTPTimeouts, ...), never copied.
	Default string
	// DefaultDoc describes a default that is no fixed value (one derived
	// from other settings); it is shown instead of Default.
	DefaultDoc string
	// Help is a one-line description.
	Help string
	// Secret values are never logged or put in an error.
	Secret bool
	// File says the value may instead be read from the file Name+"_FILE"
	// names (a mounted secret); setting both is an error.
	File bool
	// FileHelp describes the _FILE variant when it says more than "file
	// holding NAME instead (a mounted secret)".
	FileHelp string
	// Group heads the setting's section in docs/configuration.md.
	Group string
}

// FileName is the name of the _FILE variant ("" without one).
func (s Setting) FileName() string {
	if !s.File {
		return ""
	}
	return s.Name + "_FILE"
}

// ShownDefault is the default as --help and the docs show it ("" none).
func (s Setting) ShownDefault() string { return or(s.DefaultDoc, s.Default) }

// ReadBy reports whether p reads the setting.
func (s Setting) ReadBy(p Program) bool { return slices.Contains(s.Programs, p) }

// Vars are the setting as --help lists it: itself, then its _FILE variant.
func (s Setting) Vars() []Var {
	vs := []Var{{Name: s.Name, Default: s.ShownDefault(), Help: s.Help, Secret: s.Secret}}
	if s.File {
		vs = append(vs, Var{Name: s.FileName(), Help: s.fileHelp()})
	}
	return vs
}

func (s Setting) fileHelp() string {
	return or(s.FileHelp, "file holding "+s.Name+" instead (a mounted secret)")
}

// The groups, in the docs' order.
const (
	groupConnection   = "Database, task queue and account"
	groupTemporal     = "Temporal connection"
	groupPayloads     = "Payload encryption"
	groupZendesk      = "Zendesk"
	groupSubs         = "Subscription service"
	groupModel        = "Model"
	groupBigQuery     = "BigQuery"
	groupLimits       = "Rate limits"
	groupWork         = "Replies, enrichment and reconciliation"
	groupOperation    = "Running the worker"
	groupObservable   = "Logs, metrics and traces"
	groupHTTP         = "HTTP servers"
	groupAPI          = "HTTP API (supportflow-api)"
	groupCodec        = "Codec server and gateway"
	groupStarter      = "Operator command (starter)"
	groupDurations    = "Timers and retries"
	durationsIntro    = "Every duration the worker's timers and retries use (internal/policy); Go duration syntax. The worker refuses a set that breaks the relations the design relies on (for example the heartbeat interval must be shorter than the heartbeat timeout and the lease)."
	temporalVarsIntro = "Read under the names Temporal's own tools use (https://docs.temporal.io/develop/environment-configuration), so one set of variables configures supportflow and the `temporal` CLI alike (internal/temporalconn)."
)

// groupIntro is a group's paragraph in the docs, where it has one.
var groupIntro = map[string]string{
	groupTemporal:  temporalVarsIntro,
	groupDurations: durationsIntro,
	groupLimits:    "Work that calls a rate-limited service runs on that service's own task queue, where the Temporal server enforces the fleet-wide rate and each worker its concurrency, so a burst waits in the queue instead of meeting the service's 429s.",
	groupHTTP:      "The timeouts of every HTTP server supportflow runs (the API, the codec gateway, the metrics endpoint); what each bounds is net/http's (https://pkg.go.dev/net/http#Server).",
}

// readers of the settings shared by several programs.
var (
	onlyWorker      = []Program{ProgramWorker}
	onlyAPI         = []Program{ProgramAPI}
	onlyGateway     = []Program{ProgramGateway}
	onlyStarter     = []Program{ProgramStarter}
	workerAndAPI    = []Program{ProgramWorker, ProgramAPI}
	temporalClients = []Program{ProgramWorker, ProgramAPI, ProgramStarter}
	httpServers     = []Program{ProgramWorker, ProgramAPI, ProgramGateway}
)

// spec is every setting, in the docs' order.
var spec = slices.Concat(
	[]Setting{
		{Name: "DATABASE_URL", Programs: temporalClients, Group: groupConnection, Secret: true,
			Help: "PostgreSQL connection URL (required; the starter needs it for approve, retry and parity)"},
		{Name: "SUPPORTFLOW_TASK_QUEUE", Programs: temporalClients, Group: groupConnection, Default: supportflow.TaskQueue,
			Help: "task queue the worker polls and the starter starts on"},
		{Name: "SUPPORTFLOW_ACCOUNT", Programs: temporalClients, Group: groupConnection, DefaultDoc: "worker, api: ZENDESK_SUBDOMAIN, or ZENDESK_URL's host; starter: none",
			Help: "account the ledger keys actions under (the starter has no default: approve, retry and parity need it set)"},
		{Name: EnvIDPrefix, Programs: temporalClients, Group: groupConnection, DefaultDoc: "none: the IDs draft/{ticket}, enrich/{ticket}, execute/{proposal}, eval/{run} and the supportflow-* schedules",
			Help: "prefix of every workflow and schedule ID this account starts ({prefix}/draft/{ticket}, {prefix}/supportflow-scan-tickets, ...), so accounts can share a Temporal namespace (each with its own SUPPORTFLOW_TASK_QUEUE too): 1-40 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit; the same value for the account's worker, supportflow-api and starter. Set it before the account's first start: changing it later leaves running drafts, enrichments and the schedules under the old IDs, where nothing finds them"},
	},
	temporalSettings(),
	[]Setting{
		{Name: codec.EnvKeys, Programs: temporalClients, Group: groupPayloads, Secret: true, File: true,
			Help:     "keys every Temporal payload is encrypted with (AES-256-GCM): comma-separated ID:BASE64KEY, 32-byte keys (openssl rand -base64 32), the first encrypts, all decrypt; this or SUPPORTFLOW_PAYLOAD_KEYS_FILE is required by the worker, supportflow-api and starter",
			FileHelp: "file with the payload keys instead, one ID:BASE64KEY a line (a mounted secret)"},
		{Name: codec.EnvAdmitUnsealed, Programs: temporalClients, Group: groupPayloads, Default: "false",
			Help: "true admits Temporal payloads that are not sealed (plain JSON) into the worker, supportflow-api and starter, for histories written before payload encryption while they drain; false refuses them, so a workflow started or signalled around supportflow's starter and API (which seal) does not run"},

		{Name: "ZENDESK_URL", Programs: workerAndAPI, Group: groupZendesk, Help: "Zendesk API base URL (e.g. a stand-in); overrides ZENDESK_SUBDOMAIN"},
		{Name: "ZENDESK_SUBDOMAIN", Programs: workerAndAPI, Group: groupZendesk, Help: "Zendesk account subdomain (https://{subdomain}.zendesk.com)"},
		{Name: "ZENDESK_EMAIL", Programs: onlyWorker, Group: groupZendesk, Help: "Zendesk agent email for API-token auth (required)"},
		{Name: "ZENDESK_API_TOKEN", Programs: onlyWorker, Group: groupZendesk, Secret: true, File: true, Help: "Zendesk API token (required)"},

		{Name: "SUBSCRIPTIONS_URL", Programs: onlyWorker, Group: groupSubs, Help: "subscription service base URL (required)"},
		{Name: "SUBSCRIPTIONS_TOKEN", Programs: onlyWorker, Group: groupSubs, Secret: true, File: true, Help: "subscription service bearer token (required)"},

		{Name: "MODEL_BASE_URL", Programs: onlyWorker, Group: groupModel, Default: "https://api.openai.com/v1", Help: "OpenAI-compatible chat-completions base URL (OpenAI, vLLM, Ollama, llama.cpp)"},
		{Name: "MODEL_API_KEY", Programs: onlyWorker, Group: groupModel, Secret: true, File: true, Help: "model API key (optional for local servers)"},
		{Name: "MODEL_NAME", Programs: onlyWorker, Group: groupModel, Default: "gpt-4o-mini", Help: "model that drafts replies"},
		{Name: "SUPPORTFLOW_MODEL_PROMPT_TOKENS", Programs: onlyWorker, Group: groupModel, Default: "100000", Help: "estimated prompt tokens a draft may send; a longer conversation keeps its first comment and the newest that fit (keep it under the model's context window less SUPPORTFLOW_MODEL_MAX_TOKENS)"},
		{Name: "SUPPORTFLOW_MODEL_MAX_TOKENS", Programs: onlyWorker, Group: groupModel, Default: "4096", Help: "max_completion_tokens of a draft; an answer cut off there fails as ModelTruncated"},

		{Name: "BIGQUERY_PROJECT", Programs: onlyWorker, Group: groupBigQuery, Help: "Google Cloud project that runs (and is billed for) the customer lookups (required)"},
		{Name: "BIGQUERY_DATASET", Programs: onlyWorker, Group: groupBigQuery, Help: "BigQuery dataset with the customers, orders and subscriptions tables (required)"},
		{Name: "BIGQUERY_LOCATION", Programs: onlyWorker, Group: groupBigQuery, Default: bqlookup.DefaultLocation, Help: "BigQuery location of the dataset"},
		{Name: "BIGQUERY_ENDPOINT", Programs: onlyWorker, Group: groupBigQuery, Help: "BigQuery REST endpoint (e.g. a stand-in); empty means Google's, with Application Default Credentials"},
		{Name: "GOOGLE_APPLICATION_CREDENTIALS", Programs: onlyWorker, Group: groupBigQuery, Help: "path of the Google service account key file BigQuery authenticates with (Application Default Credentials, read by Google's client library: https://cloud.google.com/docs/authentication/application-default-credentials); unset: the attached service account, from the metadata server on Google Cloud"},
	},
	limitSettings(),
	[]Setting{
		{Name: "SUPPORTFLOW_REPLY_STATUS", Programs: onlyWorker, Group: groupWork, Help: "status a drafted reply sets on the ticket with the reply (open, pending, hold or solved; pending is the usual choice); empty leaves the status"},
		{Name: "SUPPORTFLOW_REPLY_TAGS", Programs: onlyWorker, Group: groupWork, Help: "comma-separated tags a drafted reply adds to the ticket with the reply (lower case, no spaces)"},
		{Name: "SUPPORTFLOW_ENRICHMENT_MODE", Programs: onlyWorker, Group: groupWork, Default: supportflow.EnrichmentShadow, Help: "shadow (write only supportflow's enrichment tables) or live (also a private note on the ticket)"},
		{Name: "SUPPORTFLOW_RECONCILE_START", Programs: onlyWorker, Group: groupWork, Default: "24h", Help: "where a cold reconciler starts reading Zendesk's exports: an RFC 3339 time, or a duration before the first run"},
		{Name: "SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE", Programs: onlyWorker, Group: groupWork, Default: "10", Help: "pace of the reconciler's incremental export requests (Zendesk allows 10 a minute per account)"},

		{Name: "SUPPORTFLOW_DRAIN_TIMEOUT", Programs: onlyWorker, Group: groupOperation, Default: "30s", Help: "how long a stopping worker lets running activities finish"},
		{Name: EnvDeploymentName, Programs: onlyWorker, Group: groupOperation, Help: "Worker Deployment Versioning: the deployment this worker belongs to (with TEMPORAL_WORKER_BUILD_ID; both or neither); empty runs unversioned (docs/versioning.md)"},
		{Name: EnvWorkerBuildID, Programs: onlyWorker, Group: groupOperation, Help: "Worker Deployment Versioning: this build's ID (e.g. the image tag or git commit); pinned workflows finish on the build that started them"},
		{Name: EnvDeploymentSetCurrent, Programs: onlyWorker, Group: groupOperation, Default: DeploymentSetCurrentIfNone, Help: "whether a versioned worker makes its build the deployment's current version once it polls: if-none (only when the deployment has none: the first deploy), always (each deploy takes new work at once), never (an operator ramps and promotes with `temporal worker deployment`)"},

		{Name: "SUPPORTFLOW_LOG_LEVEL", Programs: httpServers, Group: groupObservable, Default: "info", Help: "debug, info, warn or error"},
		{Name: EnvMetricsAddr, Programs: workerAndAPI, Group: groupObservable, Default: ":9090", Help: "address of the Prometheus /metrics endpoint (empty: off)"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Programs: workerAndAPI, Group: groupObservable, Help: "OTLP/gRPC collector for traces (host:port or URL); tracing is off when empty"},
	},
	httpSettings(),
	[]Setting{
		{Name: "SUPPORTFLOW_API_ADDR", Programs: onlyAPI, Group: groupAPI, Default: ":8080", Help: "address the HTTP API listens on"},
		{Name: EnvAPITokens, Programs: onlyAPI, Group: groupAPI, Secret: true, File: true,
			Help:     "the API's bearer tokens, comma-separated NAME:ROLE[+ROLE...]:TOKEN: NAME (1-64 of A-Za-z0-9._-) is what decisions are recorded under; roles app (start and read drafts, events, actions), approver (approve, reject), operator (retry); TOKEN 16+ characters; this or SUPPORTFLOW_API_TOKENS_FILE is needed by supportflow-api",
			FileHelp: "file with the API tokens instead, one NAME:ROLE[+ROLE...]:TOKEN a line, # comments (a mounted secret)"},
		{Name: "ZENDESK_WEBHOOK_SECRET", Programs: onlyAPI, Group: groupAPI, Secret: true, File: true, Help: "Zendesk webhook signing secret (needed by supportflow-api)"},
		{Name: "ZENDESK_WEBHOOK_SECRET_PREVIOUS", Programs: onlyAPI, Group: groupAPI, Secret: true, File: true, Help: "during a signing-secret rotation only: the secret being retired, also accepted until every webhook signing with it is gone (docs/security.md, Rotating the webhook signing secret); unset otherwise"},
		{Name: "ZENDESK_API_USER_ID", Programs: onlyAPI, Group: groupAPI, Help: "id of the Zendesk user whose API token supportflow writes with (GET /api/v2/users/me.json); its events start no lookup and supersede no draft (needed by supportflow-api)"},
		{Name: "SUPPORTFLOW_WEBHOOK_RETRY_AFTER", Programs: onlyAPI, Group: groupAPI, Default: durationText(api.DefaultWebhookRetryAfter), Help: "Retry-After of a webhook answered 503 (1-59 s: Zendesk retries only under 60 s)"},
		{Name: "SUPPORTFLOW_RELAY_INTERVAL", Programs: onlyAPI, Group: groupAPI, Default: "2s", Help: "how often undispatched ticket events are looked for when nothing wakes the relay"},
		{Name: EnvMaxStreamsPerToken, Programs: onlyAPI, Group: groupAPI, Default: strconv.Itoa(api.DefaultMaxStreamsPerToken), Help: "event streams (GET /tickets/{id}/draft/events) one API token may hold open at once; the next is answered 429 with a Retry-After"},
		{Name: EnvSSEKeepAlive, Programs: onlyAPI, Group: groupAPI, Default: durationText(api.DefaultKeepAlive), Help: "how often an event stream with nothing new sends a keep-alive comment (keep it under the idle timeout of every proxy in front of the API)"},

		{Name: "SUPPORTFLOW_CODEC_TOKENS", Programs: []Program{ProgramAPI, ProgramGateway}, Group: groupCodec, Secret: true, File: true,
			Help: "comma-separated bearer tokens (16+ characters) of the codec server at /codec/encode and /codec/decode, for the Web UI and temporal --codec-auth; unset: no codec server; codec-gateway sends the first (required there)"},
		{Name: "SUPPORTFLOW_CODEC_CORS_ORIGINS", Programs: onlyAPI, Group: groupCodec, Help: "comma-separated browser origins allowed to call the codec server: the Web UI's (e.g. https://temporal.example.com)"},
		{Name: codec.EnvAllowEncode, Programs: onlyAPI, Group: groupCodec, Default: "false", Help: "true also serves POST /codec/encode, which seals whatever payloads a codec token holder sends (the temporal CLI's start and signal with --codec-endpoint, the Web UI's start and signal forms); false answers it 403, so the codec server only decodes, which is all displaying histories needs"},
		{Name: "SUPPORTFLOW_CODEC_UPSTREAM", Programs: onlyGateway, Group: groupCodec, Help: "URL of the supportflow-api whose /codec the gateway forwards to, e.g. http://api:8000 (required)"},
		{Name: "SUPPORTFLOW_CODEC_GATEWAY_ADDR", Programs: onlyGateway, Group: groupCodec, Default: "127.0.0.1:8090", Help: "address the gateway listens on: only where the Web UI itself may be reached, since whoever reaches it reads payloads"},

		{Name: "SUPPORTFLOW_OPERATOR", Programs: onlyStarter, Group: groupStarter, DefaultDoc: "$USER, else unknown", Help: "the name an operator's approve (without --by) and retry are recorded under, as operator:NAME"},
	},
	durationSettings(),
)

// EnvMetricsAddr is the metrics endpoint's address; unlike every other
// setting, set and empty is not unset: it turns the endpoint off.
const EnvMetricsAddr = "SUPPORTFLOW_METRICS_ADDR"

// specIndex finds a setting, or the setting whose _FILE variant a name is,
// by name.
var specIndex = func() map[string]Setting {
	m := map[string]Setting{}
	for _, s := range spec {
		if _, dup := m[s.Name]; dup {
			panic("config: " + s.Name + " is in the spec twice")
		}
		m[s.Name] = s
		if s.File {
			m[s.FileName()] = s
		}
	}
	return m
}()

// Spec returns every setting, in the docs' order.
func Spec() []Setting { return slices.Clone(spec) }

// SettingOf returns the setting named name, or the one whose _FILE
// variant name is.
func SettingOf(name string) (Setting, bool) {
	s, ok := specIndex[name]
	return s, ok
}

// defaultOf is the spec's default of the variable ("" without one).
func defaultOf(name string) string { return specIndex[name].Default }

// VarsFor lists every variable p reads, _FILE variants included, in the
// spec's order, for --help.
func VarsFor(p Program) []Var {
	return varsWhere(func(s Setting) bool { return s.ReadBy(p) })
}

func varsWhere(keep func(Setting) bool) []Var {
	var vs []Var
	for _, s := range spec {
		if keep(s) {
			vs = append(vs, s.Vars()...)
		}
	}
	return vs
}

// temporalSettings are the Temporal connection's variables, as
// temporalconn lists them (temporalconn.Vars); a variable X_FILE listed
// beside X becomes X's file variant.
func temporalSettings() []Setting {
	names := map[string]bool{}
	for _, v := range temporalconn.Vars {
		names[v.Name] = true
	}
	help := map[string]string{}
	for _, v := range temporalconn.Vars {
		help[v.Name] = v.Help
	}
	var out []Setting
	for _, v := range temporalconn.Vars {
		if base, ok := strings.CutSuffix(v.Name, "_FILE"); ok && names[base] {
			continue
		}
		s := Setting{Name: v.Name, Programs: temporalClients, Group: groupTemporal, Default: v.Default, Help: v.Help, Secret: v.Secret}
		if names[v.Name+"_FILE"] {
			s.File, s.FileHelp = true, help[v.Name+"_FILE"]
		}
		out = append(out, s)
	}
	return out
}

// limitSettings are the resource limits' variables (resourceLimits).
func limitSettings() []Setting {
	var out []Setting
	for _, r := range resourceLimits {
		out = append(out,
			Setting{Name: limitVar(r.resource, "REQUESTS_PER_MINUTE"), Programs: onlyWorker, Group: groupLimits, Default: strconv.Itoa(r.perMinute), Help: r.rateHelp},
			Setting{Name: limitVar(r.resource, "CONCURRENCY"), Programs: onlyWorker, Group: groupLimits, Default: strconv.Itoa(r.concurrency), Help: r.concurrencyHelp})
	}
	return out
}

// httpSettings are the HTTP servers' timeouts (httpTimeoutVars), their
// defaults telemetry.DefaultHTTPTimeouts'.
func httpSettings() []Setting {
	var out []Setting
	for _, v := range httpTimeoutVars {
		def := telemetry.DefaultHTTPTimeouts
		out = append(out, Setting{Name: v.name, Programs: httpServers, Group: groupHTTP, Default: durationText(*v.into(&def)), Help: v.help})
	}
	return out
}

// durationSettings are policy's durations (policy.Env), their defaults
// policy.Defaults'.
func durationSettings() []Setting {
	def := reflect.ValueOf(policy.Defaults())
	var out []Setting
	for _, e := range policy.Env {
		d := time.Duration(def.Field(durationFields[e.Name]).Int())
		out = append(out, Setting{Name: e.Name, Programs: onlyWorker, Group: groupDurations, Default: durationText(d), Help: e.Help})
	}
	return out
}

// durationFields maps each of policy.Env's variables to the field of
// policy.Durations it sets: the variable's name without SUPPORTFLOW_, in
// CamelCase (SUPPORTFLOW_RETRY_BASE sets RetryBase), which is how policy
// names them. A variable without its field stops every program (and test)
// at start-up; TestDurations_ReadAsPolicyReadsThem checks the pairing
// against policy.FromEnv.
var durationFields = func() map[string]int {
	t := reflect.TypeFor[policy.Durations]()
	m := map[string]int{}
	for _, e := range policy.Env {
		want := strings.ReplaceAll(strings.TrimPrefix(e.Name, "SUPPORTFLOW_"), "_", "")
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && f.Type == reflect.TypeFor[time.Duration]() && strings.EqualFold(f.Name, want) {
				m[e.Name] = i
			}
		}
		if _, ok := m[e.Name]; !ok {
			panic(fmt.Sprintf("config: no field of policy.Durations is named after %s", e.Name))
		}
	}
	return m
}()

// PrintHelp writes every variable the worker reads with its default and
// meaning.
func PrintHelp(w io.Writer) { PrintVars(w, VarsFor(ProgramWorker)) }

// PrintAPIHelp writes the API's own variables (APIVars).
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

// Var documents one environment variable, as --help lists it (a
// Setting's _FILE variant is a Var of its own).
type Var struct {
	Name, Default, Help string
	Secret              bool
}

// Vars lists the variables the worker reads besides policy's durations
// (PrintHelp adds them).
var Vars = varsWhere(func(s Setting) bool { return s.ReadBy(ProgramWorker) && s.Group != groupDurations })

// APIVars lists the variables `supportflow-api` reads that the worker does not
// (it shares the rest: DATABASE_URL, TEMPORAL_*, SUPPORTFLOW_TASK_QUEUE,
// SUPPORTFLOW_ACCOUNT or ZENDESK_URL/SUBDOMAIN, SUPPORTFLOW_LOG_LEVEL, ...).
var APIVars = varsWhere(func(s Setting) bool { return s.ReadBy(ProgramAPI) && !s.ReadBy(ProgramWorker) })

// GatewayVars lists what `codec-gateway` reads.
var GatewayVars = VarsFor(ProgramGateway)

// DocsCommand regenerates docs/configuration.md from the spec.
const DocsCommand = "go test ./internal/config -run TestConfig_DocsMatchTheSpec -update"

// WriteDocs writes docs/configuration.md: every setting, by group, with
// the programs that read it, its default, whether it is a secret and its
// meaning.
func WriteDocs(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("<!-- Generated from internal/config's spec (spec.go) by `%s`; edit the spec, not this file. -->\n\n", DocsCommand)
	p("# Configuration\n\n")
	p("Every supportflow program is configured by environment variables alone. This page lists all of them; it is generated from the one table the loaders take their defaults from (internal/config), so it says what the code does. `worker --help` and `starter --help` print the same table for their program.\n\n")
	p("## Programs\n\n")
	p("| Read by | Command | What it is |\n|---|---|---|\n")
	about := map[Program]string{
		ProgramWorker:  "the Temporal worker: drafting, execution and enrichment workflows and their activities",
		ProgramAPI:     "the HTTP API, the Zendesk webhook and the codec server",
		ProgramGateway: "forwards a Web UI's codec requests to `supportflow-api` with a codec token",
		ProgramStarter: "the operator command: starts, approves and retries drafts, ensures the schedules",
	}
	for _, prog := range Programs {
		p("| %s | `%s` | %s |\n", prog, prog.Command(), about[prog])
	}
	p("\nThe local run (`go run ./cmd/local`) reads what `worker` and `api` read, and starts or stands in for every service left unset.\n\n")
	p("## Rules\n\n")
	p("- A variable set to an empty or blank value counts as unset: its default applies. The exception is `%s`, where set and empty turns the endpoint off.\n", EnvMetricsAddr)
	p("- Durations are Go durations: `500ms`, `90s`, `5m`, `1h30m`.\n")
	p("- A malformed value stops the program at start-up with an error naming the variable; every problem is reported at once.\n")
	p("- A secret is never logged or put in an error. One with a `_FILE` variant may instead be given as the path of a file holding it (a mounted Docker or Kubernetes secret; surrounding white space is dropped); setting both is an error.\n\n")
	group := ""
	for i, s := range spec {
		if s.Group != group {
			group = s.Group
			p("## %s\n\n", group)
			if intro := groupIntro[group]; intro != "" {
				p("%s\n\n", intro)
			}
			p("| Variable | Read by | Default | Secret | Meaning |\n|---|---|---|---|---|\n")
		}
		progs := make([]string, len(s.Programs))
		for i, prog := range s.Programs {
			progs[i] = string(prog)
		}
		def := "–"
		switch {
		case s.DefaultDoc != "":
			def = cell(s.DefaultDoc)
		case s.Default != "":
			def = "`" + cell(s.Default) + "`"
		}
		secret := ""
		if s.Secret {
			secret = "yes"
		}
		meaning := cell(s.Help)
		if s.File {
			if s.Secret {
				secret += ", or `" + s.FileName() + "`"
			}
			meaning += "<br>`" + s.FileName() + "`: " + cell(s.fileHelp())
		}
		p("| `%s` | %s | %s | %s | %s |\n", s.Name, strings.Join(progs, ", "), def, secret, meaning)
		if i+1 < len(spec) && spec[i+1].Group != group {
			p("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell escapes text for a Markdown table cell: a | would end the cell,
// and <namespace> would be taken for an HTML tag.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// durationText is d as a default is written: Go's syntax without the zero
// units Duration.String appends (1m, not 1m0s; 72h, not 72h0m0s).
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// OSEnv reads the process's environment.
var OSEnv Env = os.LookupEnv
