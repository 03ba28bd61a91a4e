package devenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a server process started by this package.
type child struct {
	name string
	cmd  *exec.Cmd
	tail *tailBuffer
	done chan struct{} // closed once the process has exited

	stopOnce sync.Once
	stopErr  error
}

// startChild starts cmd with its output sent to log (nil means discard) and
// remembered in a small tail buffer used in error messages. deathSig is the
// signal the child gets if the parent dies (Linux only); runAs, when not nil,
// is the OS user the child runs as.
func startChild(name string, cmd *exec.Cmd, log io.Writer, deathSig syscall.Signal, runAs *osUser) (*child, error) {
	if log == nil {
		log = io.Discard
	}
	c := &child{name: name, cmd: cmd, tail: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	// One writer value for both streams so that exec uses a single copying
	// goroutine and log never sees concurrent writes.
	w := io.MultiWriter(log, c.tail)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr(runAs, deathSig)
	// A server's own children may inherit its output pipe; don't let them
	// keep Wait blocked after the server itself has gone.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devenv: starting %s: %w", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has already exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitError describes a child that exited on its own, with its last output.
func (c *child) exitError() error {
	return fmt.Errorf("devenv: %s exited early (%v); last output:\n%s", c.name, c.cmd.ProcessState, c.tail.String())
}

// stop sends sig to the process, waits up to timeout for it to exit, and then
// kills its whole process group. It is safe to call more than once.
func (c *child) stop(sig os.Signal, timeout time.Duration) error {
	c.stopOnce.Do(func() {
		if c.exited() {
			return
		}
		_ = c.cmd.Process.Signal(sig)
		select {
		case <-c.done:
			return
		case <-time.After(timeout):
		}
		_ = killGroup(c.cmd.Process.Pid)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
		c.stopErr = fmt.Errorf("devenv: %s did not stop within %s of %v and was killed", c.name, timeout, sig)
	})
	return c.stopErr
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

// osUser is a numeric OS identity to run a child process as.
type osUser struct {
	name     string
	uid, gid uint32
}
