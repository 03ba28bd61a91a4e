package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
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
	manifestName    = "state.json"
	lockName        = "local.lock"
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
	manifest                manifest
}

// manifest records, in state.json, whose each half and the Zendesk side
// of the kept state are: the run's own ("local") or the settings' (a hash
// of DATABASE_URL or TEMPORAL_ADDRESS, "yours" for Zendesk). When it
// changes, the kept halves no longer go together and the run starts
// fresh.
type manifest struct {
	Postgres string `json:"postgres"`
	Temporal string `json:"temporal"`
	Zendesk  string `json:"zendesk"`
}

func sideOf(own bool, setting string) string {
	if own {
		return "local"
	}
	sum := sha256.Sum256([]byte(os.Getenv(setting)))
	return "yours:" + hex.EncodeToString(sum[:8])
}

// changes names what differs from the kept manifest m.
func (m manifest) changes(kept manifest) []string {
	var c []string
	for _, f := range []struct{ what, was, now string }{
		{"PostgreSQL (DATABASE_URL)", kept.Postgres, m.Postgres},
		{"Temporal (TEMPORAL_ADDRESS)", kept.Temporal, m.Temporal},
		{"Zendesk (the stand-in or ZENDESK_URL/ZENDESK_SUBDOMAIN)", kept.Zendesk, m.Zendesk},
	} {
		if f.was != f.now {
			c = append(c, f.what)
		}
	}
	return c
}

func newLocalState(dir string, postgres, temporal, standins, ownKeys bool) (*localState, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	zendesk := "yours"
	if standins {
		zendesk = "stand-in"
	}
	return &localState{dir: abs, postgres: postgres, temporal: temporal, standins: standins, ownKeys: ownKeys,
		postgresDir: filepath.Join(abs, postgresDirName), temporalDB: filepath.Join(abs, temporalDBName),
		manifest: manifest{Postgres: sideOf(postgres, "DATABASE_URL"), Temporal: sideOf(temporal, "TEMPORAL_ADDRESS"), Zendesk: zendesk}}, nil
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
// it when not: when fresh is asked for, when the halves are not whose
// they were (state.json), when a part is missing while another is kept,
// or the stand-ins' state cannot be read. It then records whose the
// halves are.
func (s *localState) prepare(fresh bool) error {
	if err := s.decide(fresh); err != nil {
		return err
	}
	b, err := json.Marshal(s.manifest)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.dir, manifestName), b)
}

func (s *localState) decide(fresh bool) error {
	var kept manifest
	var keptErr error
	b, err := os.ReadFile(filepath.Join(s.dir, manifestName))
	haveManifest := err == nil
	switch {
	case haveManifest:
		keptErr = json.Unmarshal(b, &kept)
	case !errors.Is(err, os.ErrNotExist):
		keptErr = err
	}
	anyKept := exists(filepath.Join(s.postgresDir, "PG_VERSION")) || exists(s.temporalDB) || exists(filepath.Join(s.dir, standinsName))
	if !fresh {
		switch {
		case keptErr != nil:
			say("%s cannot be read (%v): starting both halves fresh", manifestName, keptErr)
			return s.remove()
		case haveManifest && len(s.manifest.changes(kept)) > 0:
			say("%s changed since the state was kept: starting both halves fresh, so no draft is kept in one half only", strings.Join(s.manifest.changes(kept), ", "))
			return s.remove()
		case !haveManifest && anyKept:
			say("no record of whose the kept halves are (%s is missing): starting both fresh, so no draft is kept in one half only", manifestName)
			return s.remove()
		}
	}
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

// altDir is where postgres/ links to when PostgreSQL cannot reach the
// state directory: a directory of this state directory's own in /var/tmp
// (or the temporary directory), named by a hash of its path.
func (s *localState) altDir() string {
	sum := sha256.Sum256([]byte(s.dir))
	name := "supportflow-local-" + hex.EncodeToString(sum[:6])
	if exists("/var/tmp") {
		return filepath.Join("/var/tmp", name)
	}
	return filepath.Join(os.TempDir(), name)
}

// altTarget is the data directory in altDir that postgres/ links to.
func (s *localState) altTarget() string { return filepath.Join(s.altDir(), postgresDirName) }

// safeAlt reports whether altDir is a real directory (not a link) owned
// by root: /var/tmp is writable by everyone, so a directory or link of
// that name made by another user must not be used or deleted.
func (s *localState) safeAlt() error {
	alt := s.altDir()
	fi, err := os.Lstat(alt)
	if err != nil {
		return err
	}
	if !fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 || !rootOwned(fi) {
		return fmt.Errorf("%s is not a directory of root's (a link, a file or another user's): remove it, or use a -state directory the postgres OS user can reach", alt)
	}
	return nil
}

// ensureAlt creates altDir (searchable by the postgres OS user) and its
// data directory, refusing an altDir that is not root's own directory.
func (s *localState) ensureAlt() error {
	alt := s.altDir()
	if err := os.MkdirAll(alt, 0o755); err != nil {
		return err
	}
	if err := s.safeAlt(); err != nil {
		return err
	}
	if err := os.Chmod(alt, 0o755); err != nil {
		return err
	}
	return os.MkdirAll(s.altTarget(), 0o700)
}

// linkTarget is where postgres/ links to, made absolute (a relative link
// is read from the link's directory), or "" when it is no link.
func (s *localState) linkTarget() string {
	target, err := os.Readlink(s.postgresDir)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(s.postgresDir), target)
	}
	return filepath.Clean(target)
}

// reachablePostgresDir makes postgres/ in the state directory a link to
// altDir's data directory when PostgreSQL runs as the postgres OS user
// (this process is root) and cannot reach the state directory: a
// directory above it is closed to other users (a home directory, a
// test's temporary directory). The link is kept, and removed with its
// target (remove).
func (s *localState) reachablePostgresDir() error {
	if target := s.linkTarget(); target != "" {
		if target == s.altTarget() {
			return s.ensureAlt()
		}
		return nil // a link of the user's: PostgreSQL's data is where it points
	}
	if s.kept {
		return nil // kept data in postgres/ itself stays where it is
	}
	blocked, err := devenv.PostgresCannotReach(s.postgresDir)
	if err != nil || blocked == "" {
		return err
	}
	// New state: nothing of an earlier state directory of this path (one
	// deleted with its link) may be reused.
	if err := os.MkdirAll(s.altDir(), 0o755); err != nil {
		return err
	}
	if err := s.safeAlt(); err != nil {
		return err
	}
	if err := os.RemoveAll(s.altTarget()); err != nil {
		return err
	}
	if err := s.ensureAlt(); err != nil {
		return err
	}
	if err := os.RemoveAll(s.postgresDir); err != nil {
		return err
	}
	if err := os.Symlink(s.altTarget(), s.postgresDir); err != nil {
		return err
	}
	say("PostgreSQL runs as the postgres OS user, which cannot reach %s (%s is closed to it): its data is in %s, linked from %s (-fresh clears it)",
		s.dir, blocked, s.altTarget(), s.postgresDir)
	return nil
}

// postgresData is PostgreSQL's data directory: postgres/ in the state
// directory, or where its link points.
func (s *localState) postgresData() string {
	if target := s.linkTarget(); target != "" {
		return target
	}
	return s.postgresDir
}

// remove deletes every kept part, the markers of each half first
// (temporal.db, then postgres/PG_VERSION), so that a remove cut short
// leaves a half missing, which the next run starts fresh, and never a
// half-deleted half that looks kept. postgres/ as a link is removed, and
// its target only when it is this state directory's own altDir (never
// what a link of the user's points to); this state directory's altDir
// data is removed too, linked or not. The payload key stays: it seals
// nothing once the history is gone, and a fresh history may reuse it.
func (s *localState) remove() error {
	var errs []error
	rm := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	rm(s.temporalDB)
	target := s.linkTarget()
	own := target == "" || (target == s.altTarget() && s.safeAlt() == nil)
	if own {
		rm(filepath.Join(s.postgresData(), "PG_VERSION"))
	}
	for _, p := range []string{s.temporalDB + "-wal", s.temporalDB + "-shm", s.temporalDB + "-journal", filepath.Join(s.dir, standinsName)} {
		rm(p)
	}
	rm(s.postgresDir) // the directory, or only the link
	if os.Geteuid() == 0 && s.safeAlt() == nil {
		rm(s.altTarget()) // only root makes it (reachablePostgresDir)
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
	if err := writeFileAtomic(v.path, b); err != nil {
		return err
	}
	v.last = b
	return nil
}

// writeFileAtomic writes b to a new file renamed over path.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
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
	return os.Rename(tmp, path)
}

// afterWrites wraps a stand-in's handler so that every request but a read
// saves the state before its answer is sent: what supportflow was told
// happened is in the file when it hears it. A nil saver saves nothing.
func (v *standinSaver) afterWrites(h http.Handler) http.Handler {
	if v == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		buf := &heldResponse{header: make(http.Header)}
		func() {
			// A fault that drops the connection aborts the handler with a
			// panic (http.ErrAbortHandler) after the write applied: save,
			// then let it abort.
			defer func() {
				if p := recover(); p != nil {
					_ = v.save()
					panic(p)
				}
			}()
			h.ServeHTTP(buf, r)
		}()
		if err := v.save(); err != nil {
			say("saving the stand-ins' state: %v", err)
		}
		maps.Copy(w.Header(), buf.header)
		if buf.status == 0 {
			buf.status = http.StatusOK
		}
		w.WriteHeader(buf.status)
		_, _ = w.Write(buf.body.Bytes())
	})
}

// heldResponse keeps a response in memory until it is sent.
type heldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header { return h.header }
func (h *heldResponse) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}
func (h *heldResponse) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(b)
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
