package starter_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/starter"
)

// A Go app in another module asks for a draft of ticket 4242 and reads
// what it proposes. It needs only the contract, starter, codec and the
// Temporal SDK (TestStarter_ImportableFromAnotherModule holds starter to
// that). The payload keys are the workers' (SUPPORTFLOW_PAYLOAD_KEYS or
// SUPPORTFLOW_PAYLOAD_KEYS_FILE): everything the app sends is sealed with
// them, and what it reads is opened with them. A person then approves
// the proposal through the API (POST /proposals/{id}/approve), which
// records the approval in PostgreSQL before the draft is told.
func Example() {
	keys, err := codec.FromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err) // names the missing or malformed variable, never a key
	}
	opts := client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS"), Namespace: "default"}
	codec.Apply(&opts, keys)
	c, err := client.Dial(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s := starter.New(c, opts.DataConverter)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := s.StartDraft(ctx, 4242, "click") // joins the ticket's draft if one runs
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("drafting in", d.WorkflowID)
	for {
		st, err := s.DraftStatus(ctx, 4242)
		if err != nil {
			log.Fatal(err)
		}
		if st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil {
			fmt.Printf("proposal %s: %d bytes of reply, cancels %v\n", st.Proposal.ID, len(st.Proposal.Reply), st.Proposal.CancelSubscriptions)
			return
		}
		if supportflow.DraftTerminal(st.State) {
			fmt.Println("the draft ended", st.State)
			return
		}
		time.Sleep(time.Second)
	}
}
