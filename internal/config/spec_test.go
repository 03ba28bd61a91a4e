package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the spec")

// docsPath is docs/configuration.md, from this package's directory.
var docsPath = filepath.Join("..", "..", "docs", "configuration.md")

// docs/configuration.md is what the spec generates; -update rewrites it.
func TestConfig_DocsMatchTheSpec(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteDocs(&b))
	if *update {
		require.NoError(t, os.WriteFile(docsPath, b.Bytes(), 0o644))
		return
	}
	got, err := os.ReadFile(docsPath)
	require.NoError(t, err, "docs/configuration.md is missing; generate it: %s", DocsCommand)
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("docs/configuration.md differs from what internal/config's spec generates (edit the spec, not the file); regenerate it: %s", DocsCommand)
	}
}

// The docs list every setting once, under one heading per group, with its
// _FILE variant; nothing in them is a path on someone's machine.
func TestWriteDocs_ListsEverySettingOnce(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteDocs(&b))
	doc := b.String()
	for _, s := range spec {
		assert.Equal(t, 1, strings.Count(doc, "| `"+s.Name+"` |"), s.Name)
		if s.File {
			assert.Contains(t, doc, "`"+s.FileName()+"`: ", s.Name)
		}
	}
	var groups []string
	for _, s := range spec {
		if len(groups) == 0 || groups[len(groups)-1] != s.Group {
			assert.NotContains(t, groups, s.Group, "%s: the spec keeps a group's settings together (one section each)", s.Name)
			groups = append(groups, s.Group)
		}
	}
	for _, g := range groups {
		assert.Equal(t, 1, strings.Count(doc, "\n## "+g+"\n"), g)
	}
	for _, bad := range []string{"/home/", "/Users/", "/work/", "/tmp/"} {
		assert.NotContains(t, doc, bad)
	}
}

// Every setting says who reads it and what it is; names are unique, and
// a _FILE variant is never a setting of its own.
func TestSpec_IsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range spec {
		assert.False(t, seen[s.Name], "%s is in the spec twice", s.Name)
		seen[s.Name] = true
		assert.NotEmpty(t, s.Programs, s.Name)
		assert.NotEmpty(t, s.Help, s.Name)
		assert.NotEmpty(t, s.Group, s.Name)
		assert.NotContains(t, s.Help, "\n", s.Name)
		assert.False(t, s.Default != "" && s.DefaultDoc != "", "%s: a default or its description, not both", s.Name)
		if s.FileHelp != "" {
			assert.True(t, s.File, s.Name)
		}
		for _, p := range s.Programs {
			assert.Contains(t, Programs, p, s.Name)
		}
	}
	for _, s := range spec {
		if base, ok := strings.CutSuffix(s.Name, "_FILE"); ok {
			assert.False(t, seen[base], "%s is %s's file variant: mark %s File instead", s.Name, base, base)
		}
	}
}

// The Temporal connection's variables are temporalconn's own list, with
// its defaults and help: the spec points at it, it does not copy it.
func TestSpec_TemporalVarsAreTemporalconns(t *testing.T) {
	for _, v := range temporalconn.Vars {
		s, ok := SettingOf(v.Name)
		require.True(t, ok, v.Name)
		if s.Name == v.Name {
			assert.Equal(t, v.Default, s.Default, v.Name)
			assert.Equal(t, v.Help, s.Help, v.Name)
			assert.Equal(t, v.Secret, s.Secret, v.Name)
		} else {
			assert.Equal(t, v.Name, s.FileName())
			assert.Equal(t, v.Help, s.fileHelp(), v.Name)
		}
		for _, p := range []Program{ProgramWorker, ProgramAPI, ProgramStarter} {
			assert.True(t, s.ReadBy(p), "%s is read by %s", v.Name, p)
		}
	}
}

// Each default is the value of the code that owns it.
func TestSpec_DefaultsAreTheirOwners(t *testing.T) {
	for name, want := range map[string]any{
		"SUPPORTFLOW_TASK_QUEUE":               supportflow.TaskQueue,
		"SUPPORTFLOW_ENRICHMENT_MODE":          supportflow.EnrichmentShadow,
		"BIGQUERY_LOCATION":                    bqlookup.DefaultLocation,
		EnvMaxStreamsPerToken:                  api.DefaultMaxStreamsPerToken,
		EnvSSEKeepAlive:                        api.DefaultKeepAlive,
		"SUPPORTFLOW_WEBHOOK_RETRY_AFTER":      api.DefaultWebhookRetryAfter,
		"SUPPORTFLOW_HTTP_READ_HEADER_TIMEOUT": telemetry.DefaultHTTPTimeouts.ReadHeader,
		"SUPPORTFLOW_HTTP_READ_TIMEOUT":        telemetry.DefaultHTTPTimeouts.Read,
		"SUPPORTFLOW_HTTP_WRITE_TIMEOUT":       telemetry.DefaultHTTPTimeouts.Write,
		"SUPPORTFLOW_HTTP_IDLE_TIMEOUT":        telemetry.DefaultHTTPTimeouts.Idle,
		temporalconn.EnvAddress:                temporalconn.DefaultAddress,
		temporalconn.EnvNamespace:              temporalconn.DefaultNamespace,
		EnvDeploymentSetCurrent:                DeploymentSetCurrentIfNone,
	} {
		assert.Equal(t, want, parseAs(t, want, defaultOf(name)), name)
	}
	// policy's durations: Defaults() is the value; its own table (Env)
	// must agree with it.
	for _, e := range policy.Env {
		s, ok := SettingOf(e.Name)
		require.True(t, ok, e.Name)
		assert.Equal(t, e.Default, parseAs(t, e.Default, s.Default), "%s: policy.Env's default differs from policy.Defaults()", e.Name)
		assert.Equal(t, e.Help, s.Help, e.Name)
		assert.Equal(t, []Program{ProgramWorker}, s.Programs, e.Name)
	}
}

// Defaults are written as an operator would: 1m, not 1m0s.
func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 72 * time.Hour: "72h", 90 * time.Minute: "1h30m", time.Hour + 30*time.Second: "1h0m30s",
		15 * time.Second: "15s", 500 * time.Millisecond: "500ms", 0: "0s", 30 * 24 * time.Hour: "720h",
	} {
		assert.Equal(t, want, durationText(d), d.String())
		back, err := time.ParseDuration(want)
		require.NoError(t, err)
		assert.Equal(t, d, back)
	}
}

// Each of policy.Env's variables sets the same field of policy.Durations
// here as policy.FromEnv sets from the process's environment.
func TestDurations_ReadAsPolicyReadsThem(t *testing.T) {
	for _, e := range policy.Env {
		t.Run(e.Name, func(t *testing.T) {
			for _, other := range policy.Env {
				t.Setenv(other.Name, "")
			}
			t.Setenv(e.Name, "1h7m3s")
			want, wantErr := policy.FromEnv()
			got, err := durationsFrom(OSEnv)
			assert.Equal(t, want, got)
			assert.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(err))
			assert.NotEqual(t, policy.Defaults(), got, "the variable changed a duration")

			t.Setenv(e.Name, "soon")
			want, wantErr = policy.FromEnv()
			got, err = durationsFrom(OSEnv)
			assert.Equal(t, want, got)
			require.Error(t, err)
			assert.Equal(t, wantErr.Error(), err.Error())
		})
	}
}

// required are the variables each loader cannot do without, and no more.
var required = map[Program]map[string]string{
	ProgramWorker: {
		"DATABASE_URL": "postgres://u:pw@db/sf", "ZENDESK_URL": "http://zd.test:8080", "ZENDESK_EMAIL": "a@b.test",
		"ZENDESK_API_TOKEN": "zd-secret", "SUBSCRIPTIONS_URL": "http://subs.test", "SUBSCRIPTIONS_TOKEN": "subs-secret",
		"BIGQUERY_PROJECT": "acme-analytics", "BIGQUERY_DATASET": "commerce", codec.EnvKeys: testKeys,
	},
	ProgramAPI: {
		"DATABASE_URL": "postgres://u:pw@db/sf", "ZENDESK_SUBDOMAIN": "acme", "ZENDESK_WEBHOOK_SECRET": "s3cret",
		"ZENDESK_API_USER_ID": "900000000001", EnvAPITokens: "helpdesk:app:a-token-of-sixteen-chars", codec.EnvKeys: testKeys,
	},
	ProgramGateway: {
		"SUPPORTFLOW_CODEC_UPSTREAM": "http://api:8000", "SUPPORTFLOW_CODEC_TOKENS": "codec-token-0123456789",
	},
}

// load runs p's loader on env, returning its configuration.
func load(p Program, env Env) (any, error) {
	switch p {
	case ProgramWorker:
		return LoadWorkerFrom(env)
	case ProgramAPI:
		return LoadAPIFrom(env)
	case ProgramGateway:
		return LoadGatewayFrom(env)
	}
	panic("no loader for " + p)
}

// with is vars plus name=value.
func with(vars map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range vars {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// A loader given nothing but what it requires takes the spec's default for
// every other setting it reads, and each loaded value is that default.
func TestLoaders_DefaultsAreTheSpecs(t *testing.T) {
	w, err := LoadWorkerFrom(MapEnv(required[ProgramWorker]))
	require.NoError(t, err)
	a, err := LoadAPIFrom(MapEnv(required[ProgramAPI]))
	require.NoError(t, err)
	g, err := LoadGatewayFrom(MapEnv(required[ProgramGateway]))
	require.NoError(t, err)

	loaded := map[Program]map[string]any{
		ProgramWorker: {
			"SUPPORTFLOW_TASK_QUEUE": w.TaskQueue, "MODEL_BASE_URL": w.ModelBaseURL, "MODEL_NAME": w.ModelName,
			"BIGQUERY_LOCATION": w.BigQueryLocation, "SUPPORTFLOW_ENRICHMENT_MODE": w.EnrichmentMode,
			"SUPPORTFLOW_LOG_LEVEL": w.LogLevel, EnvMetricsAddr: w.MetricsAddr,
			"SUPPORTFLOW_RECONCILE_START": w.ReconcileBackfill, "SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE": w.ExportRequestsPerM,
			"SUPPORTFLOW_MODEL_PROMPT_TOKENS": w.PromptTokens, "SUPPORTFLOW_MODEL_MAX_TOKENS": w.MaxCompletionTokens,
			"SUPPORTFLOW_DRAIN_TIMEOUT": w.DrainTimeout, EnvDeploymentSetCurrent: w.Deployment.SetCurrent,
			codec.EnvAdmitUnsealed: w.AdmitUnsealedPayloads,
		},
		ProgramAPI: {
			"SUPPORTFLOW_TASK_QUEUE": a.TaskQueue, "SUPPORTFLOW_API_ADDR": a.Addr, "SUPPORTFLOW_LOG_LEVEL": a.LogLevel,
			EnvMetricsAddr: a.MetricsAddr, "SUPPORTFLOW_WEBHOOK_RETRY_AFTER": a.WebhookRetryAfter,
			"SUPPORTFLOW_RELAY_INTERVAL": a.RelayInterval, EnvMaxStreamsPerToken: a.MaxStreamsPerToken,
			EnvSSEKeepAlive: a.SSEKeepAlive, codec.EnvAdmitUnsealed: a.AdmitUnsealedPayloads, codec.EnvAllowEncode: a.CodecAllowEncode,
		},
		ProgramGateway: {
			"SUPPORTFLOW_CODEC_GATEWAY_ADDR": g.Addr, "SUPPORTFLOW_LOG_LEVEL": g.LogLevel,
		},
	}
	for _, r := range resourceLimits {
		loaded[ProgramWorker][limitVar(r.resource, "REQUESTS_PER_MINUTE")] = w.Limits[r.resource].PerMinute
		loaded[ProgramWorker][limitVar(r.resource, "CONCURRENCY")] = w.Limits[r.resource].Concurrency
	}
	for p, temporal := range map[Program]temporalconn.Settings{ProgramWorker: w.Temporal, ProgramAPI: a.Temporal} {
		loaded[p][temporalconn.EnvAddress] = temporal.Address
		loaded[p][temporalconn.EnvNamespace] = temporal.Namespace
		loaded[p][temporalconn.EnvDisableHostVerification] = temporal.DisableHostVerification
	}
	for p, h := range map[Program]telemetry.HTTPTimeouts{ProgramWorker: w.HTTP, ProgramAPI: a.HTTP, ProgramGateway: g.HTTP} {
		for _, v := range httpTimeoutVars {
			loaded[p][v.name] = *v.into(&h)
		}
	}
	durations := reflect.ValueOf(w.Durations)
	for _, e := range policy.Env {
		loaded[ProgramWorker][e.Name] = time.Duration(durations.FieldByIndex([]int{durationFields[e.Name]}).Int())
	}
	assert.Equal(t, policy.Defaults(), w.Durations)

	for p, values := range loaded {
		for _, s := range spec {
			if !s.ReadBy(p) || s.Default == "" {
				continue
			}
			got, ok := values[s.Name]
			if !assert.True(t, ok, "%s: %s has a default: check it here", p, s.Name) {
				continue
			}
			assert.Equal(t, parseAs(t, got, s.Default), got, "%s: %s", p, s.Name)
		}
		for name := range values {
			s, _ := SettingOf(name)
			assert.True(t, s.ReadBy(p), "%s does not read %s", p, name)
		}
	}
}

// parseAs parses the spec's default into like's type.
func parseAs(t *testing.T, like any, def string) any {
	t.Helper()
	var v any
	var err error
	switch like.(type) {
	case string:
		v = def
	case int:
		v, err = strconv.Atoi(def)
	case bool:
		v, err = strconv.ParseBool(def)
	case time.Duration:
		v, err = time.ParseDuration(def)
	default:
		t.Fatalf("parseAs: %T", like)
	}
	require.NoError(t, err, def)
	return v
}

// recordingEnv is env, noting every name asked for.
func recordingEnv(vars map[string]string, asked map[string]bool) Env {
	env := MapEnv(vars)
	return func(name string) (string, bool) {
		asked[name] = true
		return env(name)
	}
}

// readElsewhere are settings a program reads other than through its
// loader.
var readElsewhere = map[string]string{
	"GOOGLE_APPLICATION_CREDENTIALS": "Google's client library (Application Default Credentials)",
}

// Every variable a loader asks for is in the spec, for that program; and
// every setting the spec gives the program, the loader reads.
func TestLoaders_ReadWhatTheSpecListsForThem(t *testing.T) {
	for _, p := range []Program{ProgramWorker, ProgramAPI, ProgramGateway} {
		t.Run(string(p), func(t *testing.T) {
			asked := map[string]bool{}
			_, err := load(p, recordingEnv(required[p], asked))
			require.NoError(t, err)
			_, _ = load(p, recordingEnv(nil, asked))
			for name := range asked {
				s, ok := SettingOf(name)
				if assert.True(t, ok, "%s reads %s, which is not in the spec", p, name) {
					assert.True(t, s.ReadBy(p), "%s reads %s, but the spec does not list %s among its readers", p, name, p)
				}
			}
			for _, s := range spec {
				if !s.ReadBy(p) || readElsewhere[s.Name] != "" {
					continue
				}
				assert.True(t, asked[s.Name], "the spec says %s reads %s, but its loader does not", p, s.Name)
				if s.File {
					assert.True(t, asked[s.FileName()], "the spec says %s reads %s, but its loader does not", p, s.FileName())
				}
			}
		})
	}
	asked := map[string]bool{}
	_, err := HTTPTimeoutsFrom(recordingEnv(nil, asked))
	require.NoError(t, err)
	assert.Len(t, asked, len(httpTimeoutVars))
	for name := range asked {
		assert.Equal(t, httpServers, specIndex[name].Programs, name)
	}
}

// A bad value is refused, naming the variable.
func TestLoaders_RefuseBadValuesByName(t *testing.T) {
	type bad struct {
		name, value string
	}
	cases := map[Program][]bad{
		ProgramWorker: {
			{"SUPPORTFLOW_DRAIN_TIMEOUT", "forever"}, {"SUPPORTFLOW_DRAIN_TIMEOUT", "-1s"},
			{"SUPPORTFLOW_ENRICHMENT_MODE", "yolo"}, {"MODEL_BASE_URL", "ftp://model.test/v1"},
			{"SUPPORTFLOW_RECONCILE_START", "yesterday"}, {"SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE", "601"},
			{"SUPPORTFLOW_MODEL_PROMPT_TOKENS", "lots"}, {"SUPPORTFLOW_MODEL_MAX_TOKENS", "1"},
			{EnvDeploymentSetCurrent, "sometimes"}, {EnvDeploymentName, "supportflow"},
			{codec.EnvAdmitUnsealed, "maybe"}, {"SUPPORTFLOW_REPLY_STATUS", "closed"},
			{codec.EnvKeys, "k1:c2hvcnQ="}, {temporalconn.EnvTLS, "maybe"},
			{"ZENDESK_API_TOKEN_FILE", "no-such-file"},
		},
		ProgramAPI: {
			{"SUPPORTFLOW_WEBHOOK_RETRY_AFTER", "60s"}, {"SUPPORTFLOW_RELAY_INTERVAL", "0s"},
			{EnvMaxStreamsPerToken, "0"}, {EnvSSEKeepAlive, "never"}, {codec.EnvAllowEncode, "yes"},
			{"ZENDESK_API_USER_ID", "-3"}, {"SUPPORTFLOW_CODEC_CORS_ORIGINS", "https://temporal.acme.test/ui"},
			{"SUPPORTFLOW_CODEC_TOKENS", "short"}, {EnvAPITokens, "junk"}, {codec.EnvAdmitUnsealed, "maybe"},
		},
		ProgramGateway: {
			{"SUPPORTFLOW_CODEC_UPSTREAM", "http://api:8000/codec"}, {"SUPPORTFLOW_CODEC_TOKENS", ""},
		},
	}
	for _, r := range resourceLimits {
		cases[ProgramWorker] = append(cases[ProgramWorker],
			bad{limitVar(r.resource, "REQUESTS_PER_MINUTE"), "0"}, bad{limitVar(r.resource, "CONCURRENCY"), "many"})
	}
	for _, p := range []Program{ProgramWorker, ProgramAPI, ProgramGateway} {
		for _, v := range httpTimeoutVars {
			cases[p] = append(cases[p], bad{v.name, "-1s"})
		}
	}
	for _, e := range policy.Env {
		cases[ProgramWorker] = append(cases[ProgramWorker], bad{e.Name, "soon"})
	}
	for p, bads := range cases {
		for _, b := range bads {
			t.Run(string(p)+"/"+b.name+"="+b.value, func(t *testing.T) {
				_, err := load(p, MapEnv(with(required[p], b.name, b.value)))
				require.Error(t, err)
				if !errors.Is(err, policy.ErrInvalidDurations) {
					assert.ErrorIs(t, err, ErrConfig)
				}
				assert.ErrorContains(t, err, b.name)
			})
		}
	}
}

// Each program's --help lists what the spec says it reads, with the
// defaults the loaders use.
func TestHelp_IsTheSpec(t *testing.T) {
	var b bytes.Buffer
	PrintHelp(&b)
	for _, s := range spec {
		if s.ReadBy(ProgramWorker) {
			assert.Contains(t, b.String(), s.Name)
		}
	}
	for _, p := range Programs {
		names := map[string]bool{}
		for _, v := range VarsFor(p) {
			names[v.Name] = true
		}
		for _, s := range spec {
			assert.Equal(t, s.ReadBy(p), names[s.Name], "%s: %s", p, s.Name)
			if s.File {
				assert.Equal(t, s.ReadBy(p), names[s.FileName()], "%s: %s", p, s.FileName())
			}
		}
	}
	assert.Equal(t, slices.Concat(Vars, VarsFor(ProgramWorker)[len(Vars):]), VarsFor(ProgramWorker),
		"Vars are the worker's variables before policy's durations")
	for _, v := range APIVars {
		s, _ := SettingOf(v.Name)
		assert.True(t, s.ReadBy(ProgramAPI) && !s.ReadBy(ProgramWorker), v.Name)
	}
	assert.Equal(t, VarsFor(ProgramGateway), GatewayVars)
}

// SUPPORTFLOW_METRICS_ADDR set and empty turns the endpoint off; unset, it
// is the spec's default.
func TestLoaders_MetricsAddrEmptyIsOff(t *testing.T) {
	w, err := LoadWorkerFrom(MapEnv(with(required[ProgramWorker], EnvMetricsAddr, "")))
	require.NoError(t, err)
	assert.Empty(t, w.MetricsAddr)
	a, err := LoadAPIFrom(MapEnv(with(required[ProgramAPI], EnvMetricsAddr, "")))
	require.NoError(t, err)
	assert.Empty(t, a.MetricsAddr)
	w, err = LoadWorkerFrom(MapEnv(required[ProgramWorker]))
	require.NoError(t, err)
	assert.Equal(t, defaultOf(EnvMetricsAddr), w.MetricsAddr)
}

// During a webhook signing-secret rotation the API holds the retiring
// secret beside the current one, given as a value or as a file; a file
// that is empty is refused by name, and no secret is ever in an error.
func TestLoadAPI_PreviousWebhookSecret(t *testing.T) {
	t.Parallel()
	c, err := LoadAPIFrom(MapEnv(with(required[ProgramAPI], "ZENDESK_WEBHOOK_SECRET_PREVIOUS", "old-s3cret")))
	require.NoError(t, err)
	assert.Equal(t, "s3cret", c.WebhookSecret)
	assert.Equal(t, "old-s3cret", c.PreviousWebhookSecret)

	c, err = LoadAPIFrom(MapEnv(required[ProgramAPI]))
	require.NoError(t, err)
	assert.Empty(t, c.PreviousWebhookSecret, "unset outside a rotation")

	dir := t.TempDir()
	file := filepath.Join(dir, "previous")
	require.NoError(t, os.WriteFile(file, []byte("old-from-file\n"), 0o600))
	c, err = LoadAPIFrom(MapEnv(with(required[ProgramAPI], "ZENDESK_WEBHOOK_SECRET_PREVIOUS_FILE", file)))
	require.NoError(t, err)
	assert.Equal(t, "old-from-file", c.PreviousWebhookSecret)

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = LoadAPIFrom(MapEnv(with(required[ProgramAPI], "ZENDESK_WEBHOOK_SECRET_PREVIOUS_FILE", empty)))
	require.ErrorContains(t, err, "ZENDESK_WEBHOOK_SECRET_PREVIOUS_FILE: the file is empty")
	assert.NotContains(t, err.Error(), "s3cret")
}
