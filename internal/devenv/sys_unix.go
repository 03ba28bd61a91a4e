//go:build unix

package devenv

import (
	"os"
	"path/filepath"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so that a terminal's
// Ctrl-C reaches only the parent (which then stops its servers in order) and
// so that killGroup can reach the server's own children too.
func sysProcAttr(runAs *osUser, deathSig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if runAs != nil {
		attr.Credential = &syscall.Credential{Uid: runAs.uid, Gid: runAs.gid}
	}
	setDeathSig(attr, deathSig)
	return attr
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error {
	return syscall.Kill(-pid, syscall.SIGKILL)
}

// tryLock takes an exclusive advisory lock on f without blocking; it reports
// false when another process holds it.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == syscall.EWOULDBLOCK {
		return false, nil
	}
	return err == nil, err
}

// chown gives path to u; it is used only when running as root.
func chown(path string, u *osUser) error {
	return os.Chown(path, int(u.uid), int(u.gid))
}

// unsearchableAncestor returns the first directory above dir (which must be
// absolute) that u may not search (its x bit for u's owner, group or other
// class is off), or "" when u can reach dir.
func unsearchableAncestor(dir string, u *osUser) string {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return p
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return ""
		}
		mode := fi.Mode().Perm()
		var x os.FileMode
		switch {
		case st.Uid == u.uid:
			x = 0o100
		case st.Gid == u.gid:
			x = 0o010
		default:
			x = 0o001
		}
		if mode&x == 0 {
			return p
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}
