//go:build unix

package main

import (
	"os"
	"syscall"
)

// rootOwned reports whether fi (from Lstat) belongs to root.
func rootOwned(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}
