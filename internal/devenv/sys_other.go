//go:build !unix

package devenv

import (
	"os"
	"syscall"
)

// On non-Unix systems servers are started plainly: no process group, no
// parent-death signal and no switching users.
func sysProcAttr(*osUser, syscall.Signal) *syscall.SysProcAttr { return nil }

func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func tryLock(*os.File) (bool, error) { return true, nil }

func chown(string, *osUser) error { return nil }

func ramTempBase() string { return "" }

func unsearchableAncestor(string, *osUser) string { return "" }
