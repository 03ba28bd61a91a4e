// Command local runs all of supportflow on one machine: a throwaway
// PostgreSQL (or DATABASE_URL), the Temporal dev server with its Web UI and
// supportflow's search attributes, persisting to a local file (or
// TEMPORAL_ADDRESS), stand-ins for Zendesk, the subscription service,
// BigQuery and the model (each replaced by the real service as soon as its
// settings are given), the worker, the HTTP API with the Zendesk webhook,
// the schedules and a /metrics endpoint. With the stand-ins it seeds demo
// tickets and drives them through webhook -> enrichment -> draft, then
// prints what to open and how to approve a draft. Ctrl-C stops everything,
// letting the worker drain.
//
//	go run ./cmd/local          run until Ctrl-C
//	go run ./cmd/local -once    run the demo, approve one draft, check it, exit
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
	once := flag.Bool("once", false, "run the demo, approve one draft, verify it, and exit")
	stateDir := flag.String("state", ".local", "directory for the dev server's history and logs (kept across runs)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./cmd/local [-once] [-state DIR]\n\n")
		flag.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nEnvironment (unset services are started locally or replaced by stand-ins):\n")
		config.PrintHelp(os.Stderr)
		config.PrintAPIHelp(os.Stderr)
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C starts the clean stop, a second one kills.
	go func() { <-ctx.Done(); stop() }()
	if err := run(ctx, *once, *stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// localTokenName is the name of the API token the local run generates:
// what its approvals are recorded under.
const localTokenName = "local"

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

// ensurePayloadKeys gives the local run its payload keys: the
// environment's when set, else a key file in the state directory, created
// with a new random key on the first run and reused after, because the dev
// server's history there is sealed with it.
func ensurePayloadKeys(stateDir string) error {
	if os.Getenv(codec.EnvKeys) != "" || os.Getenv(codec.EnvKeysFile) != "" {
		return nil
	}
	path, err := filepath.Abs(filepath.Join(stateDir, "payload-keys"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		key := make([]byte, codec.KeySize)
		_, _ = rand.Read(key)
		content := "# supportflow's local payload keys: ID:BASE64KEY, the first encrypts.\n" +
			"local-" + time.Now().UTC().Format("20060102") + ":" + base64.StdEncoding.EncodeToString(key) + "\n"
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
		say("payload key generated in %s (the local history is encrypted with it; keep the file with %s)", path, stateDir)
	}
	os.Setenv(codec.EnvKeysFile, path)
	return nil
}

// keysHint is the payload-keys setting a starter command needs, without a
// key in it: the key file's path, or a pointer to the inline variable.
func keysHint() string {
	if f := os.Getenv(codec.EnvKeysFile); f != "" {
		return codec.EnvKeysFile + "=" + f
	}
	return codec.EnvKeys + "=<your keys>"
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type stack struct {
	zd       *standin.Zendesk
	subs     *standin.Subscriptions
	bq       *standin.BigQuery
	standins bool
}

func run(ctx context.Context, once bool, stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(stateDir, "local.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger := config.NewLogger(logFile, "info")

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		say("stopped cleanly")
	}()

	if os.Getenv("DATABASE_URL") == "" {
		say("starting a throwaway PostgreSQL")
		pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Durable: true, Log: logFile})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { say("stopping PostgreSQL"); _ = pg.Stop() })
		os.Setenv("DATABASE_URL", pg.URL)
	}
	if err := ensurePayloadKeys(stateDir); err != nil {
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
	uiURL := ""
	if os.Getenv("TEMPORAL_ADDRESS") == "" {
		// Its own dev server is open: credentials for another Temporal (a
		// Temporal Cloud key exported in this shell) must not turn TLS on.
		for _, v := range temporalconn.Vars {
			if v.Name != temporalconn.EnvAddress && v.Name != temporalconn.EnvNamespace && os.Getenv(v.Name) != "" {
				say("ignoring %s: the local run starts its own open Temporal dev server (set TEMPORAL_ADDRESS to use yours)", v.Name)
				os.Unsetenv(v.Name)
			}
		}
		say("starting the Temporal dev server with its Web UI (the CLI is built on first use: a few minutes)")
		dbFile, _ := filepath.Abs(filepath.Join(stateDir, "temporal.db"))
		tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{
			UI: true, UICodecEndpoint: gatewayURL + "/codec", DBFile: dbFile, Log: logFile, Progress: os.Stdout,
			SearchAttributes: supportflow.SearchAttributes,
		})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { say("stopping the Temporal dev server"); _ = tmp.Stop() })
		os.Setenv("TEMPORAL_ADDRESS", tmp.Address)
		uiURL = tmp.UIURL
		// The UI's page may be opened as 127.0.0.1 or as localhost.
		setDefault("SUPPORTFLOW_CODEC_CORS_ORIGINS", uiURL+","+strings.Replace(uiURL, "127.0.0.1", "localhost", 1))
	}
	st, err := startStandins(&cleanups)
	if err != nil {
		return err
	}
	if st.standins {
		// The product waits 10 minutes after a new ticket for BigQuery's
		// replication; the demo's stand-in has no lag.
		if setDefault("SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY", "2s") && setDefault("SUPPORTFLOW_ENRICH_UPDATE_DELAY", "1s") {
			say("enrichment delays shortened to 2s/1s for the demo (the product's are 10m/2m)")
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
	}
	// The local run's own token holds every role: the demo drafts and
	// approves with it, and its user is the operator too.
	generated := false
	if os.Getenv(config.EnvAPITokensFile) == "" && setDefault(config.EnvAPITokens, localTokenName+":app+approver+operator:"+randomSecret()) {
		generated = true
	}
	setDefault("ZENDESK_WEBHOOK_SECRET", randomSecret())
	if st.standins {
		setDefault("ZENDESK_API_USER_ID", strconv.FormatInt(standin.ZendeskAgentID, 10))
	}
	setDefault("SUPPORTFLOW_API_ADDR", "127.0.0.1:8080")
	setDefault("SUPPORTFLOW_METRICS_ADDR", "127.0.0.1:9090")

	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	apiCfg, err := config.LoadAPI()
	if err != nil {
		return err
	}
	demoTok, ok := demoToken(apiCfg.Tokens)
	if st.standins && !ok {
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
	go func() {
		if err := telemetry.ServeWith(bgCtx, cfg.MetricsAddr, tel.Handler(), metricsReady, cfg.HTTP); err != nil {
			logger.Error("metrics endpoint", "error", err)
		}
	}()

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
		return fmt.Errorf("api: %w", err)
	case <-ctx.Done():
		return nil
	}
	select {
	case metricsAddr = <-metricsReady:
	case <-time.After(10 * time.Second):
		return errors.New("the metrics endpoint did not start")
	}
	apiURL := "http://" + apiAddr
	upstream, _ := url.Parse(apiURL)
	gateway := apiCfg.HTTP.Server(codec.Gateway(upstream, codecToken))
	go func() { _ = gateway.Serve(gatewayLn) }()
	cleanups = append(cleanups, func() { _ = gateway.Close() })
	if st.standins {
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
	if st.standins {
		tickets, err = demo(ctx, s, st, apiURL, demoTok.Secret, apiCfg.WebhookSecret, cfg.Temporal.Address, once)
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
	if generated {
		t := apiCfg.Tokens[0]
		say("api token: %s (named %s, which its approvals are recorded under; roles app, approver, operator)", t.Secret, t.Name)
	}
	if codecGenerated {
		say("codec: temporal workflow show --address %s -w WORKFLOW_ID --codec-endpoint %s/codec --codec-auth 'Bearer %s'",
			cfg.Temporal.Address, apiURL, codecToken)
	}
	say("metrics: http://%s/metrics", metricsAddr)
	say("logs: %s", logFile.Name())
	if once {
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

// startStandins starts a stand-in for every service without settings.
func startStandins(cleanups *[]func()) (*stack, error) {
	st := &stack{
		zd: standin.NewZendesk("agent@example.test", "local-zendesk-token"), subs: standin.NewSubscriptions("local-subscriptions-token"),
		bq: standin.NewBigQuery("local-analytics"),
	}
	listen := func(name string, h http.Handler) (string, error) {
		srv, err := standin.Listen(h, "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		*cleanups = append(*cleanups, func() { srv.Close() })
		say("%s stand-in at %s", name, srv.URL())
		return srv.URL(), nil
	}
	if os.Getenv("ZENDESK_URL") == "" && os.Getenv("ZENDESK_SUBDOMAIN") == "" {
		u, err := listen("Zendesk", st.zd)
		if err != nil {
			return nil, err
		}
		os.Setenv("ZENDESK_URL", u)
		os.Setenv("ZENDESK_EMAIL", "agent@example.test")
		os.Setenv("ZENDESK_API_TOKEN", "local-zendesk-token")
		st.standins = true
	}
	if os.Getenv("SUBSCRIPTIONS_URL") == "" {
		u, err := listen("subscription-service", st.subs)
		if err != nil {
			return nil, err
		}
		os.Setenv("SUBSCRIPTIONS_URL", u)
		os.Setenv("SUBSCRIPTIONS_TOKEN", "local-subscriptions-token")
	}
	if os.Getenv("MODEL_BASE_URL") == "" {
		u, err := listen("model", standin.NewModel("local-model-key"))
		if err != nil {
			return nil, err
		}
		os.Setenv("MODEL_BASE_URL", u+"/v1")
		os.Setenv("MODEL_API_KEY", "local-model-key")
		os.Setenv("MODEL_NAME", "standin")
	}
	if os.Getenv("BIGQUERY_PROJECT") == "" {
		u, err := listen("BigQuery", st.bq)
		if err != nil {
			return nil, err
		}
		os.Setenv("BIGQUERY_ENDPOINT", u+"/bigquery/v2/")
		os.Setenv("BIGQUERY_PROJECT", "local-analytics")
		os.Setenv("BIGQUERY_DATASET", "commerce")
	}
	return st, nil
}

// demoTicket is one seeded ticket.
type demoTicket struct {
	subject, body, name string
	subs                []string
}

var demoTickets = []demoTicket{
	{"Please cancel my subscriptions", "I'd like to cancel both of my plans, please.", "Dana", []string{"demo-sub-1", "demo-sub-2"}},
	{"Late delivery", "My box has not arrived yet. Where is it?", "Lee", []string{"demo-sub-3"}},
	{"Charged twice", "I see two charges this month.", "Kim", nil},
}

// demo seeds the demo tickets on the stand-ins and drives each through
// the front door: a signed Zendesk webhook (mirror + enrichment), then a
// draft requested over the HTTP API, until it awaits approval. It prints
// how to approve each. With once, it approves the first over the API and
// checks that exactly one comment and one cancellation per subscription
// landed. Ticket IDs come from the clock, so a restarted local run never
// meets an earlier run's workflows.
func demo(ctx context.Context, s *starter.Starter, st *stack, apiURL, token, secret, temporalAddr string, once bool) ([]int64, error) {
	base := time.Now().Unix() * 10
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var ids []int64
	proposals := map[int64]string{}
	for i, d := range demoTickets {
		requester := base*10 + int64(i)
		t := standin.Ticket{ID: base + int64(i), Subject: d.subject, Description: d.body, RequesterID: requester, RequesterName: d.name, Status: "new"}
		st.zd.AddTicket(t)
		for _, sub := range d.subs {
			st.subs.AddSubscription(sub, fmt.Sprintf("demo-customer-%d", i))
		}
		st.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: fmt.Sprintf("demo-customer-%d", i), Email: strings.ToLower(d.name) + "@example.test",
			Orders: int64(3 + 4*i), ActiveSubscriptions: d.subs})
		ids = append(ids, t.ID)

		say("ticket %d (%q): created; Zendesk's ticket.created webhook starts its enrichment, which waits for its delay", t.ID, t.Subject)
	}
	for _, id := range ids {
		if err := waitFor(ctx, func() (bool, error) {
			e, err := s.EnrichmentStatus(ctx, id)
			if err == nil && e.State == supportflow.EnrichEnriched && !e.Found {
				return false, fmt.Errorf("the lookup found no customer (%+v)", e)
			}
			if err == nil && e.State == supportflow.EnrichDeadLetter {
				return false, fmt.Errorf("the lookup was dead-lettered: %s", e.Error)
			}
			return err == nil && e.State == supportflow.EnrichEnriched, nil
		}); err != nil {
			return ids, fmt.Errorf("demo: ticket %d was not enriched: %w", id, err)
		}
		if err := post(ctx, fmt.Sprintf("%s/tickets/%d/drafts", apiURL, id), token, nil, nil, http.StatusAccepted); err != nil {
			return ids, fmt.Errorf("demo: draft of ticket %d: %w", id, err)
		}
	}
	for _, id := range ids {
		var d supportflow.DraftStatus
		if err := waitFor(ctx, func() (bool, error) {
			var err error
			d, err = s.DraftStatus(ctx, id)
			if err == nil && supportflow.DraftTerminal(d.State) {
				return false, fmt.Errorf("the draft ended %s: %s", d.State, d.Error)
			}
			return err == nil && d.State == supportflow.DraftAwaitingApproval, nil
		}); err != nil {
			return ids, fmt.Errorf("demo: ticket %d: %w", id, err)
		}
		proposals[id] = d.Proposal.ID
		say("ticket %d: proposal %s awaits approval: %q (cancel %v)", id, d.Proposal.ID, d.Proposal.Reply, d.Proposal.CancelSubscriptions)
		say("  approve: curl -s -X POST -H 'Authorization: Bearer %s' %s/proposals/%s/approve", token, apiURL, d.Proposal.ID)
		say("  or:      TEMPORAL_ADDRESS=%s %s go run ./cmd/starter approve %d %s", temporalAddr, keysHint(), id, d.Proposal.ID)
	}
	if !once {
		return ids, nil
	}
	first := ids[0]
	if err := post(ctx, apiURL+"/proposals/"+proposals[first]+"/approve", token, []byte(`{"approved_by":"local-demo"}`), nil, http.StatusOK); err != nil {
		return ids, fmt.Errorf("demo: approve: %w", err)
	}
	if err := waitFor(ctx, func() (bool, error) {
		d, err := s.DraftStatus(ctx, first)
		return err == nil && d.State == supportflow.DraftDone, nil
	}); err != nil {
		return ids, fmt.Errorf("demo: the approved draft of ticket %d did not finish: %w", first, err)
	}
	if n := st.zd.CommentCount(first); n != 1 {
		return ids, fmt.Errorf("demo: %d comments on ticket %d, want exactly 1", n, first)
	}
	for _, sub := range demoTickets[0].subs {
		if n := st.subs.Cancellations(sub); n != 1 {
			return ids, fmt.Errorf("demo: %s cancelled %d times, want exactly 1", sub, n)
		}
	}
	say("demo draft approved and applied: 1 comment, 2 cancellations (ticket %d)", first)
	return ids, nil
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
