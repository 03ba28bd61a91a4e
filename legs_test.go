package supportflow_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
)

// An action's legs run in one order: what changes the customer's account
// first, the ticket update next, the reply last (it says what was done).
func TestAction_LegsInTruthfulOrder(t *testing.T) {
	t.Parallel()
	a := supportflow.Action{TicketID: 7, Comment: &supportflow.Comment{Body: "Done."}, CancelSubscriptions: []string{"s1", "s2"},
		UpdateTicket: &supportflow.TicketUpdate{Status: "pending"}}
	assert.Equal(t, []supportflow.Leg{
		{Kind: supportflow.LegCancelSubscription, Target: "s1"},
		{Kind: supportflow.LegCancelSubscription, Target: "s2"},
		{Kind: supportflow.LegTicketUpdate, Target: "7"},
		{Kind: supportflow.LegReply, Target: "7"},
	}, a.Legs())
	prev := -1
	for _, leg := range a.Legs() {
		spec, ok := supportflow.SpecOf(leg.Kind)
		require.True(t, ok, leg.Kind)
		assert.GreaterOrEqual(t, spec.Phase, prev, "phases never go back")
		prev = spec.Phase
	}
	assert.True(t, a.HasZendeskLeg())
	assert.False(t, supportflow.Action{TicketID: 7, CancelSubscriptions: []string{"s"}}.HasZendeskLeg())
}

// Every kind says how its replay is made safe, and the one kind whose
// lost answer is left unknown can be read back.
func TestLegSpecs_EveryKindHasAReplayRule(t *testing.T) {
	t.Parallel()
	for _, k := range supportflow.LegKinds() {
		spec, ok := supportflow.SpecOf(k)
		require.True(t, ok, k)
		assert.Contains(t, []supportflow.Replay{supportflow.ReplaySearchReceiver, supportflow.ReplayIdempotent}, spec.Replay, k)
		assert.NotEmpty(t, spec.Receiver, k)
	}
	_, ok := supportflow.SpecOf("refund")
	assert.False(t, ok)
	cancel, _ := supportflow.SpecOf(supportflow.LegCancelSubscription)
	assert.True(t, cancel.Resolvable)
}

// Bad ticket updates get a clear InvalidInput, before anything runs.
func TestTicketUpdate_Validate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		u    supportflow.TicketUpdate
		want string
	}{
		"empty":          {supportflow.TicketUpdate{}, "neither a status nor tags"},
		"closed":         {supportflow.TicketUpdate{Status: "closed"}, "must be one of"},
		"new":            {supportflow.TicketUpdate{Status: "new"}, "must be one of"},
		"upper case":     {supportflow.TicketUpdate{Status: "Pending"}, "must be one of"},
		"space in tag":   {supportflow.TicketUpdate{Tags: []string{"two words"}}, "no spaces"},
		"upper-case tag": {supportflow.TicketUpdate{Tags: []string{"VIP"}}, "lower-case"},
		"long tag":       {supportflow.TicketUpdate{Tags: []string{string(make([]byte, 81))}}, "1-80"},
		"twice":          {supportflow.TicketUpdate{Tags: []string{"a", "a"}}, "listed twice"},
		"too many": {supportflow.TicketUpdate{Tags: []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11",
			"a12", "a13", "a14", "a15", "a16", "a17", "a18", "a19", "a20", "a21"}}, "more than 20"},
	} {
		err := tc.u.Validate()
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, name)
		assert.ErrorContains(t, err, tc.want, name)
	}
	for _, ok := range []supportflow.TicketUpdate{{Status: "pending"}, {Tags: []string{"supportflow", "ai_replied", "team:billing"}}, {Status: "solved", Tags: []string{"x"}}} {
		assert.NoError(t, ok.Validate())
	}
	// Through the action: an update is checked there too.
	err := supportflow.Action{TicketID: 1, UpdateTicket: &supportflow.TicketUpdate{Status: "bogus"}}.Validate()
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput)
	assert.NoError(t, supportflow.Action{TicketID: 1, UpdateTicket: &supportflow.TicketUpdate{Status: "pending"}}.Validate(), "a ticket update alone is an action")
}
