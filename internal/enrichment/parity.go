package enrichment

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ParityReport compares the order coverage of a legacy enrichment table
// (what the previous system wrote) with supportflow's projection.
type ParityReport struct {
	LegacyTable string `json:"legacy_table"`
	// Tickets is the number of tickets on either side.
	Tickets int `json:"tickets"`
	// LegacyCovered and NewCovered count the tickets each side has an
	// order count for; coverage is each divided by Tickets.
	LegacyCovered int `json:"legacy_covered"`
	NewCovered    int `json:"new_covered"`
	// MissingNew are tickets only the legacy table has; MissingLegacy only
	// the projection. Mismatched have different order counts.
	MissingNew    []int64    `json:"missing_new"`
	MissingLegacy []int64    `json:"missing_legacy"`
	Mismatched    []Mismatch `json:"mismatched"`
}

// Mismatch is a ticket whose order counts differ.
type Mismatch struct {
	TicketID     int64 `json:"ticket_id"`
	LegacyOrders int64 `json:"legacy_orders"`
	NewOrders    int64 `json:"new_orders"`
}

// Coverage returns the share of tickets each side covers (0 with no
// tickets).
func (r ParityReport) Coverage() (legacy, new float64) {
	if r.Tickets == 0 {
		return 0, 0
	}
	return float64(r.LegacyCovered) / float64(r.Tickets), float64(r.NewCovered) / float64(r.Tickets)
}

// String renders the report for operators.
func (r ParityReport) String() string {
	lc, nc := r.Coverage()
	var b strings.Builder
	fmt.Fprintf(&b, "tickets on either side: %d\n", r.Tickets)
	fmt.Fprintf(&b, "coverage: legacy %s %d (%.1f%%), supportflow %d (%.1f%%)\n", r.LegacyTable, r.LegacyCovered, 100*lc, r.NewCovered, 100*nc)
	fmt.Fprintf(&b, "missing in supportflow: %d %v\n", len(r.MissingNew), r.MissingNew)
	fmt.Fprintf(&b, "missing in legacy: %d %v\n", len(r.MissingLegacy), r.MissingLegacy)
	fmt.Fprintf(&b, "mismatched order counts: %d\n", len(r.Mismatched))
	for _, m := range r.Mismatched {
		fmt.Fprintf(&b, "  ticket %d: legacy %d, supportflow %d\n", m.TicketID, m.LegacyOrders, m.NewOrders)
	}
	return b.String()
}

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// LegacyIdentifier parses a legacy table name ("table" or
// "schema.table"), refusing anything but plain identifiers: the name is
// the one piece of SQL built from configuration, so it is validated and
// then quoted.
func LegacyIdentifier(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("enrichment: legacy table %q: at most schema.table", name)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return nil, fmt.Errorf("enrichment: legacy table %q: %q is not a plain identifier", name, p)
		}
	}
	return pgx.Identifier(parts), nil
}

// Parity compares the legacy table (columns ticket_id bigint and
// order_count bigint, one row per ticket; use a view to adapt another
// shape) with this account's projection (ticket_enrichment.lifetime_orders).
func (s *Store) Parity(ctx context.Context, legacyTable string) (ParityReport, error) {
	ident, err := LegacyIdentifier(legacyTable)
	if err != nil {
		return ParityReport{}, err
	}
	r := ParityReport{LegacyTable: legacyTable, MissingNew: []int64{}, MissingLegacy: []int64{}, Mismatched: []Mismatch{}}
	rows, err := s.db.Query(ctx, `
SELECT COALESCE(l.ticket_id, n.ticket_id), l.order_count, n.lifetime_orders
FROM `+ident.Sanitize()+` l
FULL OUTER JOIN (SELECT ticket_id, lifetime_orders FROM ticket_enrichment WHERE account = $1) n
  ON n.ticket_id = l.ticket_id
ORDER BY 1`, s.account)
	if err != nil {
		return r, fmt.Errorf("enrichment: parity with %s: %w", legacyTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var ticket int64
		var legacy, cur *int64
		if err := rows.Scan(&ticket, &legacy, &cur); err != nil {
			return r, fmt.Errorf("enrichment: parity with %s: %w", legacyTable, err)
		}
		r.Tickets++
		switch {
		case legacy != nil && cur != nil:
			r.LegacyCovered++
			r.NewCovered++
			if *legacy != *cur {
				r.Mismatched = append(r.Mismatched, Mismatch{TicketID: ticket, LegacyOrders: *legacy, NewOrders: *cur})
			}
		case legacy != nil:
			r.LegacyCovered++
			r.MissingNew = append(r.MissingNew, ticket)
		default:
			r.NewCovered++
			r.MissingLegacy = append(r.MissingLegacy, ticket)
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("enrichment: parity with %s: %w", legacyTable, err)
	}
	return r, nil
}
