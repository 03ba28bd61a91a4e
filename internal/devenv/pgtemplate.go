package devenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// initdb takes most of a throwaway cluster's start-up time (over a second,
// against a fifth of a second to copy its result), so the first freshly
// initialised data directory is kept in the user's cache directory and later
// throwaway clusters start from a copy of it.

// templateMarker is written last, so a template without it is incomplete.
const templateMarker = "devenv-template-complete"

// initDataDir fills dataDir (which must not exist yet) with a fresh cluster,
// from the cached template when there is one.
func initDataDir(ctx context.Context, bin, dataDir string, runAs *osUser, log io.Writer) error {
	tmpl := templateDir(bin)
	if tmpl != "" {
		if _, err := os.Stat(filepath.Join(tmpl, templateMarker)); err == nil {
			err := copyTree(tmpl, dataDir, runAs)
			if err == nil {
				return os.Remove(filepath.Join(dataDir, templateMarker))
			}
			// A broken cache only costs speed: fall back to initdb.
			_ = os.RemoveAll(dataDir)
		}
	}
	if err := initdb(ctx, bin, dataDir, runAs, log); err != nil {
		return err
	}
	if tmpl != "" {
		saveTemplate(dataDir, tmpl)
	}
	return nil
}

// templateDir is where the template for this PostgreSQL installation lives,
// or "" when there is no user cache directory. The name changes whenever the
// server binary or the initdb arguments do.
func templateDir(bin string) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	fi, err := os.Stat(filepath.Join(bin, "postgres"))
	if err != nil {
		return ""
	}
	key := fmt.Sprintf("%s|%d|%d|%s", bin, fi.Size(), fi.ModTime().UnixNano(), strings.Join(initdbArgs, " "))
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(cache, "supportflow-devenv", "pg-template-"+hex.EncodeToString(sum[:8]))
}

// saveTemplate copies a freshly initialised dataDir to tmpl, best effort.
// Concurrent savers each build their own copy and the first rename wins.
func saveTemplate(dataDir, tmpl string) {
	if err := os.MkdirAll(filepath.Dir(tmpl), 0o700); err != nil {
		return
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmp := tmpl + ".tmp-" + hex.EncodeToString(b[:])
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := copyTree(dataDir, tmp, nil); err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(tmp, templateMarker), nil, 0o600); err != nil {
		return
	}
	_ = os.Rename(tmp, tmpl)
}

// copyTree copies the directory src to dst (which must not exist), keeping
// permission bits, and gives everything to owner when it is not nil.
func copyTree(src, dst string, owner *osUser) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("devenv: unexpected file type at %s", path)
		}
		if owner != nil {
			return os.Lchown(target, int(owner.uid), int(owner.gid))
		}
		return nil
	})
}

// copyFile copies src to dst, leaving holes where src has blocks of zeros:
// a fresh cluster's WAL segment is mostly zeros, and writing less data is
// most of what makes a copy faster than initdb.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	var size int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			chunk := buf[:n]
			var werr error
			if allZero(chunk) {
				_, werr = out.Seek(int64(n), io.SeekCurrent)
			} else {
				_, werr = out.Write(chunk)
			}
			if werr != nil {
				_ = out.Close()
				return werr
			}
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			_ = out.Close()
			return err
		}
	}
	// A trailing hole needs the size set explicitly.
	if err := out.Truncate(size); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
