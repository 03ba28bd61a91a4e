package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/supportflow/supportflow"
)

// errUsage is wrapped by every argument error: the command exits 2 and
// sends nothing.
var errUsage = errors.New("usage")

var negativeNumber = regexp.MustCompile(`^-[0-9]`)

// splitArgs separates flags (with their values) from positional
// arguments, so flags may follow them: `approve 12 p-1 --by ada`. A
// negative number ("-4") is positional, so that it is refused as a ticket
// id rather than as an unknown flag; everything after "--" is positional.
// Unknown flags are left to fs.Parse to report.
func splitArgs(fs *flag.FlagSet, args []string) (flags, positional []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(positional, args[i+1:]...)
		case len(a) < 2 || a[0] != '-' || negativeNumber.MatchString(a):
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, positional
}

// positionals checks that args holds exactly the named arguments.
func positionals(args []string, names ...string) error {
	if len(args) == len(names) {
		return nil
	}
	want := "no arguments"
	if len(names) > 0 {
		want = strings.Join(names, " ")
	}
	return fmt.Errorf("%w: expected %s, got %d argument(s) %q", errUsage, want, len(args), args)
}

func ticketArg(args []string) (int64, error) {
	if err := positionals(args, "TICKET"); err != nil {
		return 0, err
	}
	return parseTicket(args[0])
}

func parseTicket(s string) (int64, error) {
	id, err := supportflow.ParseTicketID(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUsage, err)
	}
	return id, nil
}

func parseProposalID(s string) (string, error) {
	id, err := supportflow.ParseProposalID(s)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUsage, err)
	}
	return id, nil
}

// parseTicketList parses "1,2,3": distinct positive ids, at most
// supportflow.MaxEvaluationTickets.
func parseTicketList(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: --tickets is required (comma-separated ticket ids)", errUsage)
	}
	parts := strings.Split(s, ",")
	if len(parts) > supportflow.MaxEvaluationTickets {
		return nil, fmt.Errorf("%w: --tickets lists %d tickets, more than %d", errUsage, len(parts), supportflow.MaxEvaluationTickets)
	}
	ids := make([]int64, 0, len(parts))
	seen := make(map[int64]bool, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("%w: --tickets item %d is empty", errUsage, i+1)
		}
		id, err := supportflow.ParseTicketID(p)
		if err != nil {
			return nil, fmt.Errorf("%w: --tickets item %d: %w", errUsage, i+1, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: --tickets lists ticket %d twice", errUsage, id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// textFlag returns a free-text flag's value, trimmed. Set, it must be
// 1-max characters of valid UTF-8 without control characters (a reason
// may have line breaks and tabs).
func textFlag(fs *flag.FlagSet, name string, max int, multiline bool) (string, error) {
	v := strings.TrimSpace(fs.Lookup(name).Value.String())
	if !isSet(fs, name) {
		return v, nil
	}
	if v == "" || utf8.RuneCountInString(v) > max {
		return "", fmt.Errorf("%w: --%s must be 1-%d characters", errUsage, name, max)
	}
	if !utf8.ValidString(v) {
		return "", fmt.Errorf("%w: --%s is not valid UTF-8", errUsage, name)
	}
	for _, r := range v {
		if unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t')) {
			return "", fmt.Errorf("%w: --%s must not contain control characters", errUsage, name)
		}
	}
	return v, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// flagValue returns a defined flag's typed value.
func flagValue[T any](fs *flag.FlagSet, name string) T {
	return fs.Lookup(name).Value.(flag.Getter).Get().(T)
}
