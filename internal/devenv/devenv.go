// Package devenv starts the real dependencies of supportflow (PostgreSQL and
// the Temporal dev server) as child processes on loopback ports, without
// Docker. Tests (through internal/testenv), the local-run command and the
// benchmark all use it, so the three see the same servers started the same
// way.
//
// Every server started here is put in its own process group and, on Linux,
// asked to die with its parent (Pdeathsig), so a crashed or killed parent
// does not leave servers behind in the common case. Callers should still call
// Stop, which shuts the server down cleanly and removes its temporary files.
package devenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// process may take it before the caller binds it, so servers started with it
// are retried on a bind failure.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct free ports. All listeners are held open until
// every port is chosen so that the kernel cannot hand out the same port twice.
func freePorts(n int) ([]int, error) {
	return holdPorts(n, func() (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("devenv: finding a free port: %w", err)
		}
		return l, nil
	})
}

// freeLowPorts is freePorts below 32768: Temporal's SQL schema keeps
// membership and RPC ports in a smallint column. The ports are probed at
// random in 10000-32767 (below the kernel's ephemeral range).
func freeLowPorts(n int) ([]int, error) {
	return holdPorts(n, func() (net.Listener, error) {
		for range 1000 {
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(32768-10000))); err == nil {
				return l, nil
			}
		}
		return nil, errors.New("devenv: no free port below 32768")
	})
}

// holdPorts takes n listeners from listen, holds them all open until every
// port is chosen, and returns their ports.
func holdPorts(n int, listen func() (net.Listener, error)) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := listen()
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("devenv: listener address is not TCP")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// TryLockFile takes an exclusive advisory lock on path (created if needed)
// without waiting. held is true when another process holds it; otherwise
// unlock releases the lock (the lock also goes with the process). On
// systems without advisory locks it always succeeds.
func TryLockFile(path string) (unlock func(), held bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("devenv: opening lock file: %w", err)
	}
	ok, err := tryLock(f)
	if err != nil || !ok {
		_ = f.Close()
		if err != nil {
			return nil, false, fmt.Errorf("devenv: locking %s: %w", path, err)
		}
		return nil, true, nil
	}
	return func() { _ = f.Close() }, false, nil
}
