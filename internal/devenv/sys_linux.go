package devenv

import (
	"os"
	"syscall"
)

// setDeathSig makes the kernel send sig to the child when the parent dies.
// (Strictly: when the OS thread that started it exits; the Go runtime keeps
// threads alive in the common case.)
func setDeathSig(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}

// ramTempBase returns /dev/shm when it is a writable tmpfs with at least
// 1 GiB free, else "". Creating databases there is about ten times faster
// than on a disk, even with fsync off.
func ramTempBase() string {
	const dir = "/dev/shm"
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != tmpfsMagic {
		return ""
	}
	if uint64(st.Bavail)*uint64(st.Bsize) < 1<<30 {
		return ""
	}
	f, err := os.CreateTemp(dir, ".devenv-probe-")
	if err != nil {
		return ""
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return dir
}
