package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/starter"
)

const (
	maxNameLen   = 200
	maxReasonLen = 1000
	maxDraftWhy  = 100
)

func draftStart(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	reason, err := textFlag(fs, "reason", maxDraftWhy, false)
	if err != nil {
		return err
	}
	if err := (supportflow.DraftRequest{TicketID: ticket, Reason: reason}).Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		d, err := s.StartDraft(ctx, ticket, reason)
		if err != nil {
			return err
		}
		verb := "started"
		if d.Joined {
			verb = "joined the running"
		}
		fmt.Fprintf(out, "%s draft of ticket %d: workflow %s run %s\n", verb, ticket, d.WorkflowID, d.RunID)
		return nil
	})
}

func draftStatus(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		st, err := s.DraftStatus(ctx, ticket)
		if err != nil {
			return err
		}
		return printJSON(out, st)
	})
}

// decisionArgs validates TICKET PROPOSAL_ID and --by.
func decisionArgs(fs *flag.FlagSet, args []string) (ticket int64, proposalID, by string, err error) {
	if err := positionals(args, "TICKET", "PROPOSAL_ID"); err != nil {
		return 0, "", "", err
	}
	if ticket, err = parseTicket(args[0]); err != nil {
		return 0, "", "", err
	}
	if proposalID, err = parseProposalID(args[1]); err != nil {
		return 0, "", "", err
	}
	by, err = textFlag(fs, "by", maxNameLen, false)
	return ticket, proposalID, by, err
}

func approve(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	ticket, proposalID, by, err := decisionArgs(fs, args)
	if err != nil {
		return err
	}
	// The approval is recorded in PostgreSQL, where the execution's legs
	// check it, before the draft is told.
	pool, account, err := accountDB(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return withStarter(ctx, func(s *starter.Starter) error {
		s.Approvals = proposals.New(pool, account)
		res, err := s.Approve(ctx, ticket, supportflow.ApproveRequest{ProposalID: proposalID, ApprovedBy: cmp.Or(by, operatorName())})
		if err != nil {
			return err
		}
		return printJSON(out, res)
	})
}

func reject(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	ticket, proposalID, by, err := decisionArgs(fs, args)
	if err != nil {
		return err
	}
	reason, err := textFlag(fs, "reason", maxReasonLen, true)
	if err != nil {
		return err
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		if err := s.Reject(ctx, ticket, supportflow.RejectRequest{ProposalID: proposalID, RejectedBy: by, Reason: reason}); err != nil {
			return err
		}
		fmt.Fprintf(out, "rejected proposal %s of ticket %d (workflow %s)\n", proposalID, ticket, s.IDs.Draft(ticket))
		return nil
	})
}
