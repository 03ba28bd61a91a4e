package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/standin"
)

// The kept state, in the state directory. PostgreSQL's data and the
// Temporal history are the two halves of every draft (its proposal rows
// and its workflow); the stand-ins' state holds the tickets and
// subscriptions the drafts were written for; the payload key unseals the
// history. They are kept together or started fresh together: a draft
// kept in one half only would be an orphan, which the API calls unknown
// while Temporal waits on it (or the reverse).
const (
	postgresDirName = "postgres"
	temporalDBName  = "temporal.db"
	standinsName    = "standins.json"
	keysName        = "payload-keys"
)

// statePart is one part of the kept state this run uses.
type statePart struct {
	name    string
	present func() bool
}

// localState is the state directory and the parts this run keeps there.
type localState struct {
	dir                     string
	postgres, temporal      bool // started here (no DATABASE_URL, no TEMPORAL_ADDRESS)
	standins                bool // the Zendesk stand-in, whose state goes with the drafts
	ownKeys                 bool // the payload key is the key file here
	kept                    bool // decided by prepare: the run goes on from the kept state
	saved                   *savedStandins
	postgresDir, temporalDB string
}

func newLocalState(dir string, postgres, temporal, standins, ownKeys bool) (*localState, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &localState{dir: abs, postgres: postgres, temporal: temporal, standins: standins, ownKeys: ownKeys,
		postgresDir: filepath.Join(abs, postgresDirName), temporalDB: filepath.Join(abs, temporalDBName)}, nil
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func (s *localState) parts() []statePart {
	var ps []statePart
	if s.postgres {
		ps = append(ps, statePart{"PostgreSQL's data (" + postgresDirName + "/)", func() bool { return exists(filepath.Join(s.postgresDir, "PG_VERSION")) }})
	}
	if s.temporal {
		ps = append(ps, statePart{"the Temporal history (" + temporalDBName + ")", func() bool { return exists(s.temporalDB) }})
		if s.ownKeys {
			ps = append(ps, statePart{"the payload key that unseals it (" + keysName + ")", func() bool { return exists(filepath.Join(s.dir, keysName)) }})
		}
	}
	if s.standins && (s.postgres || s.temporal) {
		ps = append(ps, statePart{"the stand-ins' state (" + standinsName + ")", func() bool { return exists(filepath.Join(s.dir, standinsName)) }})
	}
	return ps
}

// prepare decides whether the run goes on from the kept state, and removes
// it when not: when fresh is asked for, or when a part is missing while
// another is kept, or the stand-ins' state cannot be read.
func (s *localState) prepare(fresh bool) error {
	parts := s.parts()
	var have, missing []string
	for _, p := range parts {
		if p.present() {
			have = append(have, p.name)
		} else {
			missing = append(missing, p.name)
		}
	}
	switch {
	case len(parts) == 0:
		return nil
	case fresh:
		say("starting fresh (-fresh): removing the kept state in %s", s.dir)
		return s.remove()
	case len(have) == 0:
		say("new state in %s (kept across runs; -fresh starts over)", s.dir)
		return s.remove()
	case len(missing) > 0:
		say("%s missing while %s kept: starting both fresh, so no draft is kept in one half only", strings.Join(missing, ", "), strings.Join(have, ", "))
		return s.remove()
	}
	if s.standins && (s.postgres || s.temporal) {
		saved, err := readStandins(filepath.Join(s.dir, standinsName))
		if err != nil {
			say("the stand-ins' state cannot be read (%v): starting both fresh", err)
			return s.remove()
		}
		s.saved = saved
	}
	s.kept = true
	say("keeping the state in %s: %s (-fresh starts over)", s.dir, strings.Join(have, ", "))
	return nil
}

// discard is prepare's answer to a kept part that would not start: both
// halves start fresh.
func (s *localState) discard(what string, err error) error {
	say("%s would not start on the kept state (%s): starting both fresh", what, firstLine(err))
	s.kept, s.saved = false, nil
	return s.remove()
}

// reachablePostgresDir makes postgres/ in the state directory a link to a
// directory in /var/tmp when PostgreSQL runs as the postgres OS user (this
// process is root) and cannot reach the state directory: a directory
// above it is closed to other users (a home directory, a test's temporary
// directory). The link is kept, and removed with its target.
func (s *localState) reachablePostgresDir() error {
	if target, err := os.Readlink(s.postgresDir); err == nil {
		return os.MkdirAll(target, 0o700)
	}
	blocked, err := devenv.PostgresCannotReach(s.postgresDir)
	if err != nil || blocked == "" {
		return err
	}
	sum := sha256.Sum256([]byte(s.dir))
	alt := filepath.Join(os.TempDir(), "supportflow-local-"+hex.EncodeToString(sum[:6]))
	if exists("/var/tmp") {
		alt = filepath.Join("/var/tmp", filepath.Base(alt))
	}
	if err := os.MkdirAll(alt, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(alt, 0o755); err != nil {
		return err
	}
	target := filepath.Join(alt, postgresDirName)
	if err := os.RemoveAll(s.postgresDir); err != nil {
		return err
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	if err := os.Symlink(target, s.postgresDir); err != nil {
		return err
	}
	say("PostgreSQL runs as the postgres OS user, which cannot reach %s (%s is closed to it): its data is in %s, linked from %s",
		s.dir, blocked, target, s.postgresDir)
	return nil
}

// postgresData is PostgreSQL's data directory: postgres/ in the state
// directory, or where its link points.
func (s *localState) postgresData() string {
	if target, err := os.Readlink(s.postgresDir); err == nil {
		return target
	}
	return s.postgresDir
}

// remove deletes every kept part. The payload key stays: it seals
// nothing once the history is gone, and a fresh history may reuse it.
func (s *localState) remove() error {
	var errs []error
	if target, err := os.Readlink(s.postgresDir); err == nil {
		// A link to where PostgreSQL could reach: the data goes, the link
		// stays.
		return errors.Join(os.RemoveAll(target), s.removeExceptPostgres())
	}
	errs = append(errs, os.RemoveAll(s.postgresDir), s.removeExceptPostgres())
	return errors.Join(errs...)
}

func (s *localState) removeExceptPostgres() error {
	var errs []error
	for _, p := range []string{s.temporalDB, s.temporalDB + "-wal", s.temporalDB + "-shm", s.temporalDB + "-journal",
		filepath.Join(s.dir, standinsName)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// savedStandins is the stand-ins' state file: each stand-in's SaveState.
type savedStandins struct {
	Zendesk       json.RawMessage `json:"zendesk"`
	Subscriptions json.RawMessage `json:"subscriptions,omitempty"`
	BigQuery      json.RawMessage `json:"bigquery,omitempty"`
}

func readStandins(path string) (*savedStandins, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s savedStandins
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if len(s.Zendesk) == 0 {
		return nil, errors.New("it holds no Zendesk state")
	}
	// Restoring into throwaway stand-ins checks every part now, before
	// anything is started on the kept state.
	if err := standin.NewZendesk("", "").RestoreState(s.Zendesk); err != nil {
		return nil, err
	}
	if len(s.Subscriptions) > 0 {
		if err := standin.NewSubscriptions("").RestoreState(s.Subscriptions); err != nil {
			return nil, err
		}
	}
	if len(s.BigQuery) > 0 {
		if err := standin.NewBigQuery("").RestoreState(s.BigQuery); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// restore loads the kept stand-ins' state into st's stand-ins that run.
func (s *localState) restore(st *stack) error {
	if !s.kept || s.saved == nil {
		return nil
	}
	if st.zendeskLocal {
		if err := st.zd.RestoreState(s.saved.Zendesk); err != nil {
			return err
		}
	}
	if st.subsLocal && len(s.saved.Subscriptions) > 0 {
		if err := st.subs.RestoreState(s.saved.Subscriptions); err != nil {
			return err
		}
	}
	if st.bqLocal && len(s.saved.BigQuery) > 0 {
		if err := st.bq.RestoreState(s.saved.BigQuery); err != nil {
			return err
		}
	}
	return nil
}

// standinSaver writes the stand-ins' state to the state directory every
// few seconds when it changed, and once more at stop (after the worker
// stopped), each time to a new file renamed over the old one.
type standinSaver struct {
	path string
	st   *stack
	mu   sync.Mutex
	last []byte
}

func (v *standinSaver) save() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s savedStandins
	var err error
	if s.Zendesk, err = v.st.zd.SaveState(); err != nil {
		return err
	}
	if v.st.subsLocal {
		if s.Subscriptions, err = v.st.subs.SaveState(); err != nil {
			return err
		}
	}
	if v.st.bqLocal {
		if s.BigQuery, err = v.st.bq.SaveState(); err != nil {
			return err
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if bytes.Equal(b, v.last) {
		return nil
	}
	tmp := v.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	if err := os.Rename(tmp, v.path); err != nil {
		return err
	}
	v.last = b
	return nil
}

// every saves every interval until stop is closed.
func (v *standinSaver) every(interval time.Duration, stop <-chan struct{}, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := v.save(); err != nil {
				onErr(err)
			}
		}
	}
}

// ensurePayloadKeys gives the local run its payload keys: the
// environment's when set, else a key file in the state directory, created
// with a new random key on the first run and reused after, because the dev
// server's history there is sealed with it.
func ensurePayloadKeys(stateDir string) error {
	if !ownKeys() {
		return nil
	}
	path, err := filepath.Abs(filepath.Join(stateDir, keysName))
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(path, []byte(newKeyFile()), 0o600); err != nil {
			return err
		}
		say("payload key generated in %s (the local history is encrypted with it; keep the file with %s)", path, stateDir)
	}
	os.Setenv(codec.EnvKeysFile, path)
	return nil
}

// ownKeys reports whether the local run keeps its own payload key (the
// environment gives none).
func ownKeys() bool {
	return os.Getenv(codec.EnvKeys) == "" && os.Getenv(codec.EnvKeysFile) == ""
}

func newKeyFile() string {
	return fmt.Sprintf("# supportflow's local payload keys: ID:BASE64KEY, the first encrypts.\nlocal-%s:%s\n",
		time.Now().UTC().Format("20060102"), randomKey())
}
