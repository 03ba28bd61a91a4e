package workerapp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow/internal/config"
)

// promote makes the worker's build the deployment's current version as
// d.SetCurrent says: if-none only when the deployment has no current
// version (the first deploy; later builds wait for an operator to ramp and
// promote them); always unless an operator set the routing last or the
// current version is a newer build (so a restarting old pod or a rollback
// is not undone); never not at all. The server knows a
// version only once its workers poll, so it asks again every second until
// it is done or ctx ends (a few seconds after start).
// https://docs.temporal.io/production-deployment/worker-deployments/worker-versioning#rolling-out-changes-with-the-cli
func promote(ctx context.Context, c client.Client, d config.Deployment, logger *slog.Logger) {
	if d.SetCurrent == config.DeploymentSetCurrentNever {
		logger.Info("worker deployment version polling; promote it with `temporal worker deployment set-current-version`",
			"deployment", d.Name, "build_id", d.BuildID)
		return
	}
	h := c.WorkerDeploymentClient().GetHandle(d.Name)
	var last error
	for attempt := 0; ; attempt++ {
		done, err := promoteOnce(ctx, h, d, logger)
		if done {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil && !errors.Is(last, context.Canceled) {
				logger.Warn("worker deployment version not made current", "deployment", d.Name, "build_id", d.BuildID, "error", last)
			}
			return
		case <-time.After(time.Second):
		}
		if attempt == 60 {
			logger.Warn("worker deployment version still not current after a minute; retrying", "deployment", d.Name, "build_id", d.BuildID, "error", last)
		}
	}
}

// promoterIdentity marks the routing changes supportflow's workers make,
// so that one an operator made (a ramp, a rollback) is told apart and left
// alone.
const promoterIdentity = "supportflow-worker"

func promoteOnce(ctx context.Context, h client.WorkerDeploymentHandle, d config.Deployment, logger *slog.Logger) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Nothing is set without a successful read and its conflict token: an
	// error (the deployment not known yet because no version has polled, the
	// server unavailable) is retried, never taken for "no current version".
	desc, err := h.Describe(actx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return false, err
	}
	info := desc.Info
	cur := info.RoutingConfig.CurrentVersion
	if cur != nil && cur.BuildID == d.BuildID {
		logger.Info("worker deployment version is current", "deployment", d.Name, "build_id", d.BuildID)
		return true, nil
	}
	if cur != nil {
		leave := ""
		switch {
		case d.SetCurrent == config.DeploymentSetCurrentIfNone:
			leave = "the deployment has a current version"
		case !strings.HasPrefix(info.LastModifierIdentity, promoterIdentity):
			leave = "an operator set the routing (a ramp or a rollback)"
		case createdAfter(info, cur.BuildID, d.BuildID):
			leave = "the current version is a newer build"
		}
		if leave != "" {
			logger.Info("worker deployment version polling beside the current one; ramp or promote it with `temporal worker deployment`",
				"deployment", d.Name, "build_id", d.BuildID, "current_build_id", cur.BuildID, "why", leave)
			return true, nil
		}
	}
	_, err = h.SetCurrentVersion(actx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: d.BuildID, ConflictToken: desc.ConflictToken,
		Identity: promoterIdentity + "/" + d.BuildID})
	if err != nil {
		return false, err
	}
	logger.Info("worker deployment version made current", "deployment", d.Name, "build_id", d.BuildID)
	return true, nil
}

// createdAfter reports whether build a's version was created after build
// b's in the deployment: an old build's worker restarting during a deploy
// does not take the routing back.
func createdAfter(info client.WorkerDeploymentInfo, a, b string) bool {
	var ta, tb time.Time
	for _, v := range info.VersionSummaries {
		switch v.Version.BuildID {
		case a:
			ta = v.CreateTime
		case b:
			tb = v.CreateTime
		}
	}
	return !ta.IsZero() && !tb.IsZero() && ta.After(tb)
}
