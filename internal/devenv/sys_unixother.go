//go:build unix && !linux

package devenv

import "syscall"

// setDeathSig does nothing: only Linux has a parent-death signal, so elsewhere
// a killed parent may leave its servers running.
func setDeathSig(*syscall.SysProcAttr, syscall.Signal) {}

// ramTempBase returns "": no RAM-backed directory is assumed here.
func ramTempBase() string { return "" }
