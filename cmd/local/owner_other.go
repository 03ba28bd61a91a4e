//go:build !unix

package main

import "os"

// rootOwned is true: without Unix users there is no root to check for
// (and PostgreSQL never runs as another OS user here).
func rootOwned(os.FileInfo) bool { return true }
