// Command local runs all of supportflow on one machine: PostgreSQL (or
// DATABASE_URL), the Temporal dev server with its Web UI and supportflow's
// search attributes (or TEMPORAL_ADDRESS), both keeping their state in the
// state directory, stand-ins for Zendesk, the subscription service,
// BigQuery and the model (each replaced by the real service as soon as its
// settings are given), the worker, the HTTP API with the Zendesk webhook
// and the supervisor console, the schedules and a /metrics endpoint. With
// the stand-ins it seeds demo tickets and drives them through webhook ->
// enrichment -> draft, then prints what to open and how to approve a
// draft. Ctrl-C stops everything, letting the worker drain; the next start
// goes on from the kept state, or -fresh starts over.
//
//	go run ./cmd/local          run until Ctrl-C
//	go run ./cmd/local -once    run the demo, approve one draft, check it, exit
//	go run ./cmd/local -slow -fail-cancellation -lose-answer -stall-model
//	                            the demo with the stand-ins' faults switched on
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
)

func main() {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./cmd/local [-once] [-state DIR] [-fresh] [-slow] [-fail-cancellation] [-lose-answer] [-stall-model]\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nPorts (0 picks a free port):\n")
		for _, p := range [][2]string{
			{"SUPPORTFLOW_API_ADDR", defaultAPIAddr + " (the API, the webhook and the console)"},
			{"SUPPORTFLOW_METRICS_ADDR", defaultMetricsAddr},
			{envTemporalPort, strconv.Itoa(defaultTemporalPort) + " (the dev server's frontend)"},
			{envUIPort, strconv.Itoa(defaultUIPort) + " (the Temporal Web UI)"},
			{envPostgresPort, strconv.Itoa(defaultPostgresPort)},
			{envStandinsPort, "0 (N: Zendesk on N, the subscription service N+1, the model N+2, BigQuery N+3)"},
		} {
			fmt.Fprintf(os.Stderr, "  %-36s %s\n", p[0], p[1])
		}
		fmt.Fprintf(os.Stderr, "\nEnvironment (unset services are started locally or replaced by stand-ins):\n")
		config.PrintHelp(os.Stderr)
		config.PrintAPIHelp(os.Stderr)
	}
	sw, err := parseSwitches(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(2)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first Ctrl-C starts the clean stop; a second one stops at
		// once, but saves the stand-ins' state first (the servers die with
		// this process).
		<-sigs
		stop()
		<-sigs
		say("stopping at once: saving the stand-ins' state first")
		if save := finalSave.Load(); save != nil {
			(*save)()
		}
		os.Exit(1)
	}()
	if err := run(ctx, sw); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// localTokenName is the name of the API token the local run generates:
// what its approvals are recorded under.
const localTokenName = "local"

// localAccount is the account the local run's rows are kept under with
// the Zendesk stand-in (whose URL, the default account, changes port from
// run to run).
const localAccount = "local"

// demoToken is the first API token the demo can draft and approve with.
func demoToken(tokens []api.Token) (api.Token, bool) {
	for _, t := range tokens {
		if t.Has(api.RoleApp) && t.Has(api.RoleApprover) {
			return t, true
		}
	}
	return api.Token{}, false
}

// setDefault sets an unset variable and reports whether it did.
func setDefault(name, value string) bool {
	if _, ok := os.LookupEnv(name); ok {
		return false
	}
	os.Setenv(name, value)
	return true
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randomKey() string {
	key := make([]byte, codec.KeySize)
	_, _ = rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
}

// stack is the stand-ins; each *Local is true when that stand-in runs.
type stack struct {
	zd                                       *standin.Zendesk
	subs                                     *standin.Subscriptions
	bq                                       *standin.BigQuery
	model                                    *standin.Model
	zendeskLocal, subsLocal, bqLocal, modelL bool
}

func newStack() *stack {
	return &stack{
		zd:    standin.NewZendesk("agent@example.test", "local-zendesk-token"),
		subs:  standin.NewSubscriptions("local-subscriptions-token"),
		bq:    standin.NewBigQuery("local-analytics"),
		model: standin.NewModel("local-model-key"),
		// A stand-in runs for each service without settings.
		zendeskLocal: os.Getenv("ZENDESK_URL") == "" && os.Getenv("ZENDESK_SUBDOMAIN") == "",
		subsLocal:    os.Getenv("SUBSCRIPTIONS_URL") == "",
		modelL:       os.Getenv("MODEL_BASE_URL") == "",
		bqLocal:      os.Getenv("BIGQUERY_PROJECT") == "",
	}
}

// ports are the addresses the local run binds, each with the setting that
// moves it.
type ports struct {
	api, metrics, temporal, ui, postgres binding
	standins                             [4]binding // Zendesk, subscriptions, model, BigQuery
	temporalPort, uiPort, postgresPort   int
	standinsBase                         int
}

func readPorts(localPG, localTemporal bool) (*ports, error) {
	setDefault("SUPPORTFLOW_API_ADDR", defaultAPIAddr)
	setDefault("SUPPORTFLOW_METRICS_ADDR", defaultMetricsAddr)
	p := &ports{
		api:     addrBinding("the HTTP API", "SUPPORTFLOW_API_ADDR", os.Getenv("SUPPORTFLOW_API_ADDR")),
		metrics: addrBinding("the metrics endpoint", "SUPPORTFLOW_METRICS_ADDR", os.Getenv("SUPPORTFLOW_METRICS_ADDR")),
	}
	var errs []error
	read := func(name string, def int) int {
		v, err := portOf(name, def)
		errs = append(errs, err)
		return v
	}
	p.temporalPort = read(envTemporalPort, defaultTemporalPort)
	p.uiPort = read(envUIPort, defaultUIPort)
	p.postgresPort = read(envPostgresPort, defaultPostgresPort)
	p.standinsBase = read(envStandinsPort, defaultStandinsPort)
	if p.standinsBase > 65535-3 {
		errs = append(errs, fmt.Errorf("%s=%d: the four stand-ins need it and the three ports above it", envStandinsPort, p.standinsBase))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.temporal = portBinding("the Temporal dev server", envTemporalPort, p.temporalPort)
	p.ui = portBinding("the Temporal Web UI", envUIPort, p.uiPort)
	p.postgres = portBinding("PostgreSQL", envPostgresPort, p.postgresPort)
	for i, name := range []string{"the Zendesk stand-in", "the subscription-service stand-in", "the model stand-in", "the BigQuery stand-in"} {
		port := 0
		if p.standinsBase != 0 {
			port = p.standinsBase + i
		}
		p.standins[i] = binding{what: name, setting: envStandinsPort, addr: fmt.Sprintf("127.0.0.1:%d", port),
			hint: fmt.Sprintf("%s=%d (the four stand-ins take it and the three ports above; 0 picks free ports)", envStandinsPort, p.standinsBase+4)}
	}
	// Every fixed port is checked before anything starts, so a taken one
	// is named at once.
	check := []binding{p.api}
	if os.Getenv("SUPPORTFLOW_METRICS_ADDR") != "" {
		check = append(check, p.metrics)
	}
	if localTemporal {
		check = append(check, p.temporal, p.ui)
	}
	if localPG {
		check = append(check, p.postgres)
	}
	check = append(check, p.standins[:]...)
	for _, b := range check {
		errs = append(errs, b.check())
	}
	return p, errors.Join(errs...)
}

func run(ctx context.Context, sw *switches) error {
	if err := os.MkdirAll(sw.stateDir, 0o755); err != nil {
		return err
	}
	// One run at a time on a state directory: a second would find its
	// servers' files in use.
	unlock, held, err := devenv.TryLockFile(filepath.Join(sw.stateDir, lockName))
	if err != nil {
		return err
	}
	if held {
		abs, _ := filepath.Abs(sw.stateDir)
		return fmt.Errorf("another local run is using the state directory %s: stop it first, or give this one another directory with -state DIR", abs)
	}
	defer unlock()
	logFile, err := os.OpenFile(filepath.Join(sw.stateDir, "local.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger := config.NewLogger(logFile, "info")

	localPG, localTemporal := os.Getenv("DATABASE_URL") == "", os.Getenv("TEMPORAL_ADDRESS") == ""
	pts, err := readPorts(localPG, localTemporal)
	if err != nil {
		return err
	}
	st := newStack()
	state, err := newLocalState(sw.stateDir, localPG, localTemporal, st.zendeskLocal, ownKeys())
	if err != nil {
		return err
	}
	if !localPG || !localTemporal {
		say("DATABASE_URL or TEMPORAL_ADDRESS is set: that half of the state is yours to keep or clear along with %s", state.dir)
	}
	if err := state.prepare(sw.fresh); err != nil {
		return err
	}

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		say("stopped cleanly")
	}()

	if err := ensurePayloadKeys(sw.stateDir); err != nil {
		return err
	}
	codecToken := os.Getenv("SUPPORTFLOW_CODEC_TOKENS")
	codecGenerated := codecToken == ""
	if codecGenerated {
		codecToken = randomSecret()
		os.Setenv("SUPPORTFLOW_CODEC_TOKENS", codecToken)
	}
	codecToken, _, _ = strings.Cut(codecToken, ",")
	codecToken = strings.TrimSpace(codecToken)
	// The Web UI has no sign-in here, so it sends no token: a loopback
	// gateway adds the codec token on its way to the API's codec server,
	// as an authenticating proxy in front of a production Web UI would.
	gatewayLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer gatewayLn.Close()
	gatewayURL := "http://" + gatewayLn.Addr().String()
	uiURL, err := startServers(ctx, state, pts, gatewayURL, logFile, &cleanups)
	if err != nil {
		return err
	}
	if err := startStandins(st, state, pts, sw, &cleanups); err != nil {
		return err
	}
	if st.zendeskLocal {
		// The product waits 10 minutes after a new ticket for BigQuery's
		// replication; the demo's stand-in has no lag.
		// Each is shortened unless it is set.
		newTicket := setDefault("SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY", "2s")
		update := setDefault("SUPPORTFLOW_ENRICH_UPDATE_DELAY", "1s")
		if newTicket || update {
			say("enrichment delays left unset shortened to 2s (new ticket) and 1s (update) for the demo (the product's are 10m/2m)")
		}
		// The stand-ins have no rate limits; the product's defaults are
		// real services' (Zendesk's Team plan: 200 requests a minute).
		lifted := false
		for _, r := range policy.Resources {
			lifted = setDefault("SUPPORTFLOW_"+strings.ToUpper(r)+"_REQUESTS_PER_MINUTE", "60000") || lifted
		}
		if lifted {
			say("resource rate limits raised to 60,000 requests a minute for the stand-ins")
		}
		setDefault("ZENDESK_API_USER_ID", strconv.FormatInt(standin.ZendeskAgentID, 10))
		// The stand-in's URL, the default account, changes port from run
		// to run; the kept rows must stay the account's.
		setDefault("SUPPORTFLOW_ACCOUNT", localAccount)
	}
	if sw.stallMod && st.modelL && os.Getenv("SUPPORTFLOW_MODEL_ATTEMPT_TIMEOUT") == "" &&
		os.Getenv("SUPPORTFLOW_HEARTBEAT_TIMEOUT") == "" && os.Getenv("SUPPORTFLOW_HEARTBEAT_INTERVAL") == "" {
		// The attempt's deadline must stay above the heartbeat timeout,
		// and that above the heartbeat interval (policy.Durations.Validate).
		os.Setenv("SUPPORTFLOW_MODEL_ATTEMPT_TIMEOUT", "20s")
		os.Setenv("SUPPORTFLOW_HEARTBEAT_TIMEOUT", "10s")
		os.Setenv("SUPPORTFLOW_HEARTBEAT_INTERVAL", "2s")
		say("for -stall-model: model attempt deadline 20s, heartbeat timeout 10s, interval 2s (the product's are 5m, 60s, 15s)")
	}
	// The local run's own token holds every role: the demo drafts and
	// approves with it, and its user is the operator too.
	generated := false
	if os.Getenv(config.EnvAPITokensFile) == "" && setDefault(config.EnvAPITokens, localTokenName+":app+approver+operator:"+randomSecret()) {
		generated = true
	}
	setDefault("ZENDESK_WEBHOOK_SECRET", randomSecret())

	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	apiCfg, err := config.LoadAPI()
	if err != nil {
		return err
	}
	demoTok, ok := demoToken(apiCfg.Tokens)
	if st.zendeskLocal && !ok {
		return fmt.Errorf("the demo drafts and approves over the API: %s needs a token with the app and approver roles", config.EnvAPITokens)
	}
	// Migrate before anything reads the schema.
	if _, err := migrations.MigrateURL(ctx, cfg.DatabaseURL); err != nil {
		return err
	}

	tel, err := telemetry.New(ctx, telemetry.Config{ServiceName: "supportflow-local", OTLPEndpoint: cfg.OTLPEndpoint})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	})
	bgCtx, stopBackground := context.WithCancel(context.Background())
	metricsReady := make(chan string, 1)
	metricsDone := make(chan error, 1)
	if cfg.MetricsAddr != "" {
		go func() {
			metricsDone <- telemetry.ServeWith(bgCtx, cfg.MetricsAddr, tel.Handler(), metricsReady, cfg.HTTP)
		}()
	}

	workerDone := make(chan error, 1)
	go func() { workerDone <- workerapp.Run(bgCtx, cfg, logger, tel) }()
	apiReady := make(chan string, 1)
	apiDone := make(chan error, 1)
	go func() { apiDone <- workerapp.RunAPI(bgCtx, apiCfg, logger, tel, apiReady) }()
	cleanups = append(cleanups, func() {
		say("stopping the API and the worker (draining up to %s)", cfg.DrainTimeout)
		stopBackground()
		<-apiDone
		<-workerDone
	})
	var apiAddr, metricsAddr string
	select {
	case apiAddr = <-apiReady:
	case err := <-apiDone:
		apiDone <- err
		return fmt.Errorf("api: %w", pts.api.explain(err))
	case <-ctx.Done():
		return nil
	}
	if cfg.MetricsAddr != "" {
		select {
		case metricsAddr = <-metricsReady:
		case err := <-metricsDone:
			return pts.metrics.explain(err)
		case <-time.After(10 * time.Second):
			return errors.New("the metrics endpoint did not start")
		}
	}
	apiURL := "http://" + apiAddr
	upstream, _ := url.Parse(apiURL)
	gateway := apiCfg.HTTP.Server(codec.Gateway(upstream, codecToken))
	go func() { _ = gateway.Serve(gatewayLn) }()
	cleanups = append(cleanups, func() { _ = gateway.Close() })

	// What to open comes first: the console and how to sign in, then what
	// the starter command needs.
	say("console: %s/console/ (sign in with the API token below; its roles decide the buttons)", apiURL)
	if generated {
		t := apiCfg.Tokens[0]
		say("api token: %s (named %s, which its approvals are recorded under; roles app, approver, operator)", t.Secret, t.Name)
	} else {
		say("api token: one of yours (%s or %s; this run does not print them)", config.EnvAPITokens, config.EnvAPITokensFile)
	}
	starterEnv := starterEnvironment(cfg, state.postgres)
	say("starter retry PROPOSAL_ID (and the other starter commands) need this environment:")
	fmt.Printf("      export %s\n      go run ./cmd/starter retry PROPOSAL_ID\n", strings.Join(starterEnv, " "))
	if on := sw.on(); len(on) > 0 {
		say("demo switches on: %s", strings.Join(on, " "))
		if off := standinsOff(st); len(off) > 0 {
			say("the switches act on the stand-ins only; they change nothing at %s (your settings)", strings.Join(off, ", "))
		}
	}

	if st.zendeskLocal {
		// The stand-in sends signed ticket event webhooks for every change,
		// supportflow's own included, as Zendesk does once a webhook is
		// subscribed to ticket events.
		st.zd.SetWebhook(standin.WebhookConfig{URL: apiURL + "/webhooks/zendesk", Secret: apiCfg.WebhookSecret})
	}

	// The local run's own client: the product's options, its logs discarded.
	o, err := workerapp.ClientOptions(cfg.Temporal, cfg.PayloadKeys, cfg.AdmitUnsealedPayloads, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	if uiURL != "" {
		// Closed histories are kept as long as the tables' rows.
		if _, err := c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
			Namespace: cfg.Temporal.Namespace,
			Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(cfg.Durations.Retention)},
		}); err != nil {
			logger.Warn("setting the namespace retention", "error", err)
		}
	}
	s := &starter.Starter{Client: c, TaskQueue: cfg.TaskQueue, IDs: supportflow.IDs{Prefix: cfg.IDPrefix}, Converter: o.DataConverter}
	if err := s.EnsureSchedules(ctx, cfg.Durations.ScanInterval, cfg.Durations.ReconcileInterval); err != nil {
		return err
	}
	say("schedules: %s every %s, %s every %s, %s daily", s.IDs.ScanSchedule(), cfg.Durations.ScanInterval,
		s.IDs.ReconcileSchedule(), cfg.Durations.ReconcileInterval, s.IDs.PruneSchedule())

	var tickets []int64
	if st.zendeskLocal {
		d := &demoRun{s: s, st: st, apiURL: apiURL, token: demoTok.Secret, shownToken: demoTok.Secret}
		if !generated {
			// A token of the user's is never printed.
			d.shownToken = "$SUPPORTFLOW_TOKEN"
			say("the approve commands below read your API token (approver role) from SUPPORTFLOW_TOKEN: export SUPPORTFLOW_TOKEN=...")
		}
		if state.kept {
			tickets = append(tickets, d.listKept(ctx)...)
		}
		seeded, err := d.run(ctx, sw.once)
		tickets = append(tickets, seeded...)
		if err != nil {
			return err
		}
	}
	say("ready")
	if uiURL != "" {
		link := fmt.Sprintf("%s/namespaces/%s/workflows", uiURL, cfg.Temporal.Namespace)
		if len(tickets) > 0 {
			var ids []string
			for _, t := range tickets {
				ids = append(ids, fmt.Sprintf("'%d'", t))
			}
			link += "?query=" + url.QueryEscape(fmt.Sprintf("%s IN (%s)", supportflow.SearchAttrTicketID, strings.Join(ids, ", ")))
		}
		say("Temporal Web UI: %s (payloads decoded through the codec server at %s/codec; Temporal stores them encrypted)", link, apiURL)
	}
	say("api: %s", apiURL)
	if codecGenerated {
		say("codec: temporal workflow show --address %s -w WORKFLOW_ID --codec-endpoint %s/codec --codec-auth 'Bearer %s'",
			cfg.Temporal.Address, apiURL, codecToken)
	}
	if metricsAddr != "" {
		say("metrics: http://%s/metrics", metricsAddr)
	}
	say("logs: %s", logFile.Name())
	if sw.once {
		return nil
	}
	say("press Ctrl-C to stop")
	select {
	case <-ctx.Done():
		return nil
	case err := <-workerDone:
		workerDone <- err
		return fmt.Errorf("worker stopped: %w", err)
	case err := <-apiDone:
		apiDone <- err
		return fmt.Errorf("api stopped: %w", err)
	}
}

// startServers starts PostgreSQL and the Temporal dev server, each unless
// its address is given, on the kept state when there is one. When a kept
// half will not start because its files cannot be read (dataFilesError),
// both start fresh; any other failure stops the run and removes nothing.
func startServers(ctx context.Context, state *localState, pts *ports, gatewayURL string, log io.Writer, cleanups *[]func()) (uiURL string, err error) {
	for {
		var pg *devenv.Postgres
		if state.postgres {
			if err := state.reachablePostgresDir(); err != nil {
				return "", err
			}
			say("starting PostgreSQL (data in %s)", state.postgresData())
			pg, err = devenv.StartPostgres(ctx, devenv.PostgresOptions{Durable: true, DataDir: state.postgresData(), Port: pts.postgresPort, Log: log})
			if err != nil {
				if perr := pts.postgres.explain(err); perr != err || !state.kept || ctx.Err() != nil || !dataFilesError(err) {
					return "", perr
				}
				if err := state.discard("PostgreSQL", err); err != nil {
					return "", err
				}
				continue
			}
			os.Setenv("DATABASE_URL", pg.URL)
		}
		if !state.temporal {
			if pg != nil {
				*cleanups = append(*cleanups, func() { say("stopping PostgreSQL"); _ = pg.Stop() })
			}
			return "", nil
		}
		// Its own dev server is open: credentials for another Temporal (a
		// Temporal Cloud key exported in this shell) must not turn TLS on.
		for _, v := range temporalconn.Vars {
			if v.Name != temporalconn.EnvAddress && v.Name != temporalconn.EnvNamespace && os.Getenv(v.Name) != "" {
				say("ignoring %s: the local run starts its own open Temporal dev server (set TEMPORAL_ADDRESS to use yours)", v.Name)
				os.Unsetenv(v.Name)
			}
		}
		say("starting the Temporal dev server with its Web UI, history in %s (the CLI is built on first use: a few minutes)", state.temporalDB)
		tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{
			UI: true, UICodecEndpoint: gatewayURL + "/codec", DBFile: state.temporalDB, Log: log, Progress: os.Stdout,
			Port: pts.temporalPort, UIPort: pts.uiPort,
			SearchAttributes: supportflow.SearchAttributes,
		})
		if err != nil {
			perr := pts.temporal.explain(err)
			if perr == err {
				perr = pts.ui.explain(err)
			}
			if perr != err || !state.kept || ctx.Err() != nil || !dataFilesError(err) {
				if pg != nil {
					_ = pg.Stop()
				}
				return "", perr
			}
			if pg != nil {
				say("stopping PostgreSQL to start it fresh")
				_ = pg.Stop()
			}
			if err := state.discard("the Temporal dev server", err); err != nil {
				return "", err
			}
			continue
		}
		if pg != nil {
			*cleanups = append(*cleanups, func() { say("stopping PostgreSQL"); _ = pg.Stop() })
		}
		*cleanups = append(*cleanups, func() { say("stopping the Temporal dev server"); _ = tmp.Stop() })
		os.Setenv("TEMPORAL_ADDRESS", tmp.Address)
		// The UI's page may be opened as 127.0.0.1 or as localhost.
		setDefault("SUPPORTFLOW_CODEC_CORS_ORIGINS", tmp.UIURL+","+strings.Replace(tmp.UIURL, "127.0.0.1", "localhost", 1))
		return tmp.UIURL, nil
	}
}

// startStandins serves a stand-in for every service without settings,
// restores the kept state into them, keeps saving it, and applies the
// demo switches.
func startStandins(st *stack, state *localState, pts *ports, sw *switches, cleanups *[]func()) error {
	if err := state.restore(st); err != nil {
		return err
	}
	var saver *standinSaver
	if st.zendeskLocal && (state.postgres || state.temporal) {
		saver = &standinSaver{path: filepath.Join(state.dir, standinsName), st: st}
	}
	listen := func(i int, name string, h http.Handler) (string, error) {
		b := pts.standins[i]
		srv, err := standin.Listen(h, b.addr)
		if err != nil {
			return "", b.explain(err)
		}
		*cleanups = append(*cleanups, func() { srv.Close() })
		say("%s stand-in at %s", name, srv.URL())
		return srv.URL(), nil
	}
	if st.zendeskLocal {
		u, err := listen(0, "Zendesk", saver.afterWrites(st.zd))
		if err != nil {
			return err
		}
		os.Setenv("ZENDESK_URL", u)
		os.Setenv("ZENDESK_EMAIL", "agent@example.test")
		os.Setenv("ZENDESK_API_TOKEN", "local-zendesk-token")
	}
	if st.subsLocal {
		u, err := listen(1, "subscription-service", saver.afterWrites(st.subs))
		if err != nil {
			return err
		}
		os.Setenv("SUBSCRIPTIONS_URL", u)
		os.Setenv("SUBSCRIPTIONS_TOKEN", "local-subscriptions-token")
	}
	if st.modelL {
		u, err := listen(2, "model", st.model)
		if err != nil {
			return err
		}
		os.Setenv("MODEL_BASE_URL", u+"/v1")
		os.Setenv("MODEL_API_KEY", "local-model-key")
		os.Setenv("MODEL_NAME", "standin")
	}
	if st.bqLocal {
		u, err := listen(3, "BigQuery", st.bq)
		if err != nil {
			return err
		}
		os.Setenv("BIGQUERY_ENDPOINT", u+"/bigquery/v2/")
		os.Setenv("BIGQUERY_PROJECT", "local-analytics")
		os.Setenv("BIGQUERY_DATASET", "commerce")
	}
	applySwitches(st, sw)
	if saver != nil {
		if err := saver.save(); err != nil {
			return fmt.Errorf("saving the stand-ins' state: %w", err)
		}
		onErr := func(err error) { say("saving the stand-ins' state: %v", err) }
		save := func() {
			if err := saver.save(); err != nil {
				onErr(err)
			}
		}
		finalSave.Store(&save)
		stop := make(chan struct{})
		// What the demo seeds goes in no request: the periodic save
		// keeps it.
		go saver.every(2*time.Second, stop, onErr)
		// Appended before the worker's cleanup, so it runs after the
		// worker stopped: the last save holds everything it wrote.
		*cleanups = append(*cleanups, func() {
			close(stop)
			save()
		})
	}
	return nil
}

// finalSave saves the stand-ins' state when a second Ctrl-C stops the
// run at once.
var finalSave atomic.Pointer[func()]

// dataFileMarkers are what PostgreSQL and the dev server (SQLite) say
// when the files they were given cannot be used: damaged, or written by
// another version.
var dataFileMarkers = []string{
	// PostgreSQL
	"database files are incompatible with server",
	"is not a valid data directory",
	"could not locate a valid checkpoint record",
	"invalid checkpoint record",
	"invalid primary checkpoint record",
	"incorrect checksum in control file",
	"could not read file \"global/pg_control\"",
	"pg_control",
	// SQLite, under the Temporal dev server
	"file is not a database",
	"database disk image is malformed",
	"SQLITE_CORRUPT",
	"SQLITE_NOTADB",
}

// dataFilesError reports whether a server's start failure is about the
// kept files themselves, which starting fresh mends. Anything else (a
// port, a lock, a build of the Temporal CLI, a missing binary) is not:
// starting fresh would lose the kept drafts and mend nothing.
func dataFilesError(err error) bool {
	msg := err.Error()
	for _, m := range dataFileMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// standinsOff names the services whose settings are given, so no
// stand-in (and no switch) acts for them.
func standinsOff(st *stack) []string {
	var off []string
	for _, s := range []struct {
		local bool
		name  string
	}{{st.zendeskLocal, "Zendesk"}, {st.subsLocal, "the subscription service"}, {st.modelL, "the model"}} {
		if !s.local {
			off = append(off, s.name)
		}
	}
	return off
}

// applySwitches injects the demo switches' faults into the stand-ins.
func applySwitches(st *stack, sw *switches) {
	// A request takes the first injected fault that matches it, so the
	// one-off faults go before the slow ones, which apply to the rest.
	if sw.failCancellation && st.subsLocal {
		st.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/*", Status: http.StatusUnprocessableEntity, Times: 1})
	}
	if sw.loseAnswer && st.zendeskLocal {
		st.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true, Times: 1})
	}
	if sw.stallMod && st.modelL {
		st.model.Inject(standin.ModelFault{Silence: true, Times: 1})
	}
	if sw.slow {
		if st.modelL {
			st.model.Inject(standin.ModelFault{TokenDelay: 300 * time.Millisecond, Times: -1})
		}
		if st.zendeskLocal {
			st.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Delay: 2 * time.Second, Times: -1})
		}
		if st.subsLocal {
			st.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/*", Delay: 2 * time.Second, Times: -1})
		}
	}
}

// starterEnvironment is what cmd/starter reads to reach this run's
// Temporal and database (see cmd/starter's doc), as export arguments.
// Secrets are never printed: a setting that holds one is named only, and
// DATABASE_URL is printed only when it is the run's own PostgreSQL
// (ownPG), whose URL holds no password.
func starterEnvironment(cfg config.Worker, ownPG bool) []string {
	env := []string{
		"TEMPORAL_ADDRESS=" + cfg.Temporal.Address,
		"TEMPORAL_NAMESPACE=" + cfg.Temporal.Namespace,
		"SUPPORTFLOW_TASK_QUEUE=" + cfg.TaskQueue,
	}
	if cfg.IDPrefix != "" {
		env = append(env, "SUPPORTFLOW_ID_PREFIX="+cfg.IDPrefix)
	}
	switch {
	case os.Getenv(codec.EnvKeysFile) != "":
		env = append(env, codec.EnvKeysFile+"="+shellQuote(os.Getenv(codec.EnvKeysFile)))
	default:
		env = append(env, codec.EnvKeys+"=<yours>")
	}
	if v := os.Getenv("SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS"); v != "" {
		env = append(env, "SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS="+shellQuote(v))
	}
	for _, v := range temporalconn.Vars {
		if v.Name != temporalconn.EnvAddress && v.Name != temporalconn.EnvNamespace && os.Getenv(v.Name) != "" {
			env = append(env, v.Name+"=<yours>")
		}
	}
	if ownPG {
		env = append(env, "DATABASE_URL="+shellQuote(cfg.DatabaseURL))
	} else {
		env = append(env, "DATABASE_URL=<yours>")
	}
	return append(env, "SUPPORTFLOW_ACCOUNT="+shellQuote(cfg.Account))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func post(ctx context.Context, u, token string, body []byte, h http.Header, want int) error {
	req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return nil
}

func waitFor(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
