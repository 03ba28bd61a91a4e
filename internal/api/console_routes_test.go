package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/supportflow/supportflow"
)

// A drafted proposal's ID names its draft run (the ticket, the run ID
// without dashes, its number in the run); any other ID names none.
func TestDraftRunOf(t *testing.T) {
	run, ok := draftRunOf(42, "42-0123456789abcdef0123456789abcdef-3")
	assert.True(t, ok)
	assert.Equal(t, "01234567-89ab-cdef-0123-456789abcdef", run)
	for _, id := range []string{
		"43-0123456789abcdef0123456789abcdef-3", // another ticket's
		"42-0123456789abcdef0123456789abcde-3",  // short run
		"42-0123456789ABCDEF0123456789ABCDEF-3", // not as a draft writes it
		"p-1", "42-0123456789abcdef0123456789abcdef",
	} {
		_, ok := draftRunOf(42, id)
		assert.False(t, ok, id)
	}
}

// The conversation shown is what the prompt kept: the first comment and
// the newest, the middle ones the result counts as left out dropped;
// authors by role, falling back to customer or agent for comments from
// before roles were recorded.
func TestConversationView_WhatTheModelSaw(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var comments []supportflow.ConversationComment
	for i := range 6 {
		comments = append(comments, supportflow.ConversationComment{ID: int64(i + 1), Author: supportflow.AuthorCustomer, Role: supportflow.RoleRequester,
			Body: "c", At: at.Add(time.Duration(i) * time.Minute)})
	}
	comments[1].Role, comments[1].Author = "", supportflow.AuthorAgent
	comments[2].Role = supportflow.RoleSupportflow
	in := supportflow.GenerateInput{ProposalID: "p", Ticket: supportflow.TicketContext{
		Conversation:    supportflow.Conversation{Subject: "Plan", Comments: comments},
		OmittedComments: 1, Enrichment: &supportflow.Enrichment{ActiveSubscriptions: []string{"s-1"}}}, Outcome: "held back"}

	ids := func(v ConversationView) []int64 {
		var out []int64
		for _, c := range v.Comments {
			out = append(out, c.ID)
		}
		return out
	}
	v := conversationView(9, in, nil)
	assert.False(t, v.Drafted)
	assert.Equal(t, []int64{1, 2, 3, 4, 5, 6}, ids(v), "not drafted yet: what the draft read")
	assert.Equal(t, 1, v.OmittedComments)
	assert.Equal(t, supportflow.RoleAgent, v.Comments[1].AuthorRole, "before roles: by Author")
	assert.Equal(t, supportflow.RoleSupportflow, v.Comments[2].AuthorRole)
	assert.Equal(t, []string{"s-1"}, v.ActiveSubscriptions)
	assert.Equal(t, "held back", v.PreviousAttempt)

	result := supportflow.DraftProposal{ID: "p", OmittedComments: 3,
		Cancellations: []supportflow.CancellationView{{SubscriptionID: "s-1", Plan: "gold"}}}
	v = conversationView(9, in, &result)
	assert.True(t, v.Drafted)
	assert.Equal(t, []int64{1, 4, 5, 6}, ids(v), "the prompt left out two more: the oldest after the first")
	assert.Equal(t, 3, v.OmittedComments)
	assert.Equal(t, "gold", v.Cancellations[0].Plan)
	assert.Len(t, in.Ticket.Conversation.Comments, 6, "the input is not changed")
}
