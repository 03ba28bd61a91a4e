package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The local run's own settings: each switch is a flag and an environment
// variable (the flag wins when both are given); the ports are environment
// variables, like the API's and the metrics endpoint's.
const (
	envFresh            = "SUPPORTFLOW_LOCAL_FRESH"
	envSlow             = "SUPPORTFLOW_LOCAL_SLOW"
	envFailCancellation = "SUPPORTFLOW_LOCAL_FAIL_CANCELLATION"
	envLoseAnswer       = "SUPPORTFLOW_LOCAL_LOSE_ANSWER"
	envStallModel       = "SUPPORTFLOW_LOCAL_STALL_MODEL"

	envTemporalPort = "SUPPORTFLOW_LOCAL_TEMPORAL_PORT"
	envUIPort       = "SUPPORTFLOW_LOCAL_TEMPORAL_UI_PORT"
	envPostgresPort = "SUPPORTFLOW_LOCAL_POSTGRES_PORT"
	envStandinsPort = "SUPPORTFLOW_LOCAL_STANDINS_PORT"
)

// The ports the local run binds by default (0: a free port each run).
const (
	defaultAPIAddr      = "127.0.0.1:8080"
	defaultMetricsAddr  = "127.0.0.1:9090"
	defaultTemporalPort = 7233 // the Temporal CLI's default address
	defaultUIPort       = 8233 // the dev server's default Web UI port
	defaultPostgresPort = 55432
	defaultStandinsPort = 0
)

// switches are the demo's switches.
type switches struct {
	once, fresh                                  bool
	stateDir                                     string
	slow, failCancellation, loseAnswer, stallMod bool
}

// switchVar is one switch: its flag, its variable and what it does.
type switchVar struct {
	flag, env, help string
	v               *bool
}

func (s *switches) vars() []switchVar {
	return []switchVar{
		{"fresh", envFresh, "start fresh: remove the kept PostgreSQL data, Temporal history and stand-in state first", &s.fresh},
		{"slow", envSlow, "slow stand-ins: the model streams a word every 300ms; each Zendesk write and cancellation takes 2s", &s.slow},
		{"fail-cancellation", envFailCancellation, "the subscription stand-in refuses the first cancellation (422): that execution ends needs_attention", &s.failCancellation},
		{"lose-answer", envLoseAnswer, "the first Zendesk ticket update lands but its answer is lost (the connection is closed)", &s.loseAnswer},
		{"stall-model", envStallModel, "the model's first completion goes silent after its first chunk, until the attempt's deadline (shortened to 20s unless set); the retry answers", &s.stallMod},
	}
}

// parseSwitches reads the flags, each switch defaulting to its variable.
func parseSwitches(fs *flag.FlagSet, args []string) (*switches, error) {
	s := &switches{}
	fs.BoolVar(&s.once, "once", false, "run the demo, approve one draft, verify it, and exit")
	fs.StringVar(&s.stateDir, "state", ".local", "directory of the kept state: PostgreSQL's data, the Temporal history, the stand-ins' state, the payload key, the log")
	var errs []error
	for _, sv := range s.vars() {
		def := false
		if v := strings.TrimSpace(os.Getenv(sv.env)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want 1, true, 0 or false", sv.env, v))
			}
			def = b
		}
		fs.BoolVar(sv.v, sv.flag, def, sv.help+" (or "+sv.env+"=1)")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if s.once && s.failCancellation {
		errs = append(errs, errors.New("-once checks that the approved draft was applied in full; it cannot run with -fail-cancellation"))
	}
	return s, errors.Join(errs...)
}

// on names the demo switches that are on.
func (s *switches) on() []string {
	var names []string
	for _, sv := range s.vars()[1:] {
		if *sv.v {
			names = append(names, "-"+sv.flag)
		}
	}
	return names
}

// portOf reads a port variable: unset or blank is def, 0 a free port.
func portOf(name string, def int) (int, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("%s=%q: want a port, 0-65535 (0 picks a free port)", name, v)
	}
	return p, nil
}

// binding is one address the local run listens on, with what it is and
// the setting that moves it.
type binding struct {
	what, setting, addr string
	// hint is how to move it: the setting with an example value.
	hint string
}

func portBinding(what, setting string, port int) binding {
	return binding{what: what, setting: setting, addr: fmt.Sprintf("127.0.0.1:%d", port),
		hint: fmt.Sprintf("%s=%d (0 picks a free port)", setting, port+1)}
}

func addrBinding(what, setting, addr string) binding {
	host, _, _ := net.SplitHostPort(addr)
	return binding{what: what, setting: setting, addr: addr, hint: fmt.Sprintf("%s=%s:0 (a free port) or another host:port", setting, host)}
}

// fixed reports whether the binding names a port (not 0, a free one).
func (b binding) fixed() bool {
	_, port, err := net.SplitHostPort(b.addr)
	return err == nil && port != "0" && port != ""
}

// inUse is the error of a port someone else holds.
func (b binding) inUse(err error) error {
	return fmt.Errorf("%s cannot listen on %s: the port is already in use (%v); stop what holds it, or move it with %s",
		b.what, b.addr, err, b.hint)
}

// check fails when the address cannot be listened on now.
func (b binding) check() error {
	if !b.fixed() {
		return nil
	}
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return b.inUse(err)
		}
		return fmt.Errorf("%s cannot listen on %s (%v); move it with %s", b.what, b.addr, err, b.hint)
	}
	_ = ln.Close()
	return nil
}

// explain turns a server's start failure into the port error when its
// port is taken now (it may have been taken after check), else returns
// err as it is.
func (b binding) explain(err error) error {
	if err == nil || !b.fixed() {
		return err
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return b.inUse(err)
	}
	if cerr := b.check(); cerr != nil {
		return fmt.Errorf("%w (starting it: %v)", cerr, firstLine(err))
	}
	return err
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
