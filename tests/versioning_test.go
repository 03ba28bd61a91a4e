package tests

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/supportflow/supportflow"
)

// A deploy never breaks a draft waiting for a person. Build A runs as the
// deployment's current version; a draft starts on it and waits for
// approval. Build B, whose draft workflow starts differently (a timer
// first: replaying A's history on it would fail as non-deterministic),
// is deployed beside it and made current. A new draft runs on B; the
// waiting draft, pinned to A, is approved and finishes on A with exactly
// one reply.
func TestVersioning_WaitingDraftSurvivesADeploy(t *testing.T) {
	t.Parallel()
	binB := buildChangedWorker(t)
	s := newStack(t)
	deployment := "supportflow-" + runNonce + "-versioning"
	s.extraEnv = []string{"TEMPORAL_DEPLOYMENT_NAME=" + deployment, "TEMPORAL_WORKER_BUILD_ID=build-a"}
	s.startWorker()
	s.waitCurrentVersion(deployment, "build-a")

	waiting := s.seedTicket("Please cancel my plan", "sub-1")
	_, err := s.starter.StartDraft(ctxT(t), waiting, "tests")
	require.NoError(t, err)
	st := s.waitState(waiting, supportflow.DraftAwaitingApproval)

	// Build B deployed beside A, made current at once.
	s.extraEnv = []string{"TEMPORAL_DEPLOYMENT_NAME=" + deployment, "TEMPORAL_WORKER_BUILD_ID=build-b",
		"SUPPORTFLOW_DEPLOYMENT_SET_CURRENT=always"}
	s.bin = binB
	s.startExtraWorker()
	s.waitCurrentVersion(deployment, "build-b")

	fresh := s.seedTicket("Where is my order?")
	_, err = s.starter.StartDraft(ctxT(t), fresh, "tests")
	require.NoError(t, err)
	s.waitState(fresh, supportflow.DraftAwaitingApproval)

	_, err = s.starter.Approve(ctxT(t), waiting, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "tests"})
	require.NoError(t, err)
	done := s.waitState(waiting, supportflow.DraftDone)
	assert.Equal(t, supportflow.DraftDone, done.State)
	assert.Equal(t, 1, s.zd.CommentCount(waiting), "exactly one reply")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"), "exactly one cancellation")

	waitingBuilds, waitingTimers := s.workflowTaskBuilds(supportflow.DraftWorkflowID(waiting))
	assert.Equal(t, []string{"build-a"}, waitingBuilds, "the waiting draft ran on build A only, to its end")
	assert.Zero(t, waitingTimers, "A's draft workflow, not B's")
	freshBuilds, freshTimers := s.workflowTaskBuilds(supportflow.DraftWorkflowID(fresh))
	assert.Equal(t, []string{"build-b"}, freshBuilds, "the new draft ran on build B")
	assert.Equal(t, 1, freshTimers, "B's draft workflow (its timer first)")
	s.mu.Lock()
	logs := s.logs.String()
	s.mu.Unlock()
	assert.NotContains(t, strings.ToLower(logs), "nondetermin", "no worker replayed a run on code it did not start on")
}

// waitCurrentVersion waits until the deployment's current version is
// buildID (the worker makes itself current once it polls).
func (s *stack) waitCurrentVersion(deployment, buildID string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		d, err := s.temporal.WorkflowService().DescribeWorkerDeployment(context.Background(),
			&workflowservice.DescribeWorkerDeploymentRequest{Namespace: "default", DeploymentName: deployment})
		if err != nil {
			return false
		}
		info := d.GetWorkerDeploymentInfo()
		// The routing reaches the task queues' partitions asynchronously on
		// newer servers; older ones do not report it (unspecified).
		propagated := info.GetRoutingConfigUpdateState() != enumspb.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS
		return propagated && info.GetRoutingConfig().GetCurrentDeploymentVersion().GetBuildId() == buildID
	}, waitBudget, 200*time.Millisecond, "%s is %s's current version", buildID, deployment)
}

// workflowTaskBuilds reads a workflow's latest run's history: the build IDs
// that completed its workflow tasks (each once, in order) and how many
// one-millisecond timers (build B's change) it started.
func (s *stack) workflowTaskBuilds(workflowID string) (builds []string, timers int) {
	s.t.Helper()
	it := s.temporal.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	seen := map[string]bool{}
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(s.t, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			b := buildOf(ev.GetWorkflowTaskCompletedEventAttributes())
			if !seen[b] {
				seen[b] = true
				builds = append(builds, b)
			}
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			// B's change: a one-millisecond timer (A's timers wait hours).
			if ev.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration() == time.Millisecond {
				timers++
			}
		}
	}
	return builds, timers
}

func buildOf(a *historypb.WorkflowTaskCompletedEventAttributes) string {
	if v := a.GetDeploymentVersion(); v != nil {
		return v.GetBuildId()
	}
	return a.GetWorkerVersion().GetBuildId()
}

// buildChangedWorker builds the worker from a copy of this module whose
// draft workflow starts with a one-millisecond timer: a change that is not
// replay-safe, as a careless deploy would make.
func buildChangedWorker(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".local", "bench", "tests", "docs", "deploy", "local":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(src, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, filepath.Join(src, rel))
	}))
	draft := filepath.Join(src, "workflows", "draft.go")
	b, err := os.ReadFile(draft)
	require.NoError(t, err)
	sig := "func (w *Workflows) DraftReply(ctx workflow.Context, req supportflow.DraftRequest) (supportflow.DraftStatus, error) {\n"
	require.Contains(t, string(b), sig, "the draft workflow's signature moved: update this test")
	changed := strings.Replace(string(b), sig, sig+"\tif err := workflow.Sleep(ctx, time.Millisecond); err != nil {\n\t\treturn supportflow.DraftStatus{}, err\n\t}\n", 1)
	require.NoError(t, os.WriteFile(draft, []byte(changed), 0o644))
	bin := filepath.Join(dir, "worker-b")
	build := exec.Command("go", "build", "-o", bin, "./worker")
	build.Dir = src
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building worker B: %s", out)
	return bin
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
