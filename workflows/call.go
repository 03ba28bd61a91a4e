package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
)

// call starts activity a with in (no argument when I is supportflow.None)
// under ctx's activity options. It is the one way the workflows call an
// activity: by the contract's name, with the contract's payload types, so
// the workflows need none of the packages that implement them. The
// command it records is the same as calling the Go method by reference:
// the activity type is the name either way.
func call[I, O any](ctx workflow.Context, a supportflow.Activity[I, O], in I) result[O] {
	var args []any
	if _, none := any(in).(supportflow.None); !none {
		args = []any{in}
	}
	return result[O]{workflow.ExecuteActivity(ctx, a.Name, args...)}
}

// result is an activity's future, typed by the contract.
type result[O any] struct{ f workflow.Future }

// Get waits for the activity and stores its result in *out (nil ignores
// it, as does an activity whose O is supportflow.None).
func (r result[O]) Get(ctx workflow.Context, out *O) error {
	if _, none := any(*new(O)).(supportflow.None); none || out == nil {
		return r.f.Get(ctx, nil)
	}
	return r.f.Get(ctx, out)
}
