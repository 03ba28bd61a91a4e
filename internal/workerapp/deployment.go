package workerapp

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow/internal/config"
)

// promote makes the worker's build the deployment's current version as
// d.SetCurrent says: if-none only when the deployment has no current
// version (the first deploy; later builds wait for an operator to ramp and
// promote them), always at once, never not at all. The server knows a
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

func promoteOnce(ctx context.Context, h client.WorkerDeploymentHandle, d config.Deployment, logger *slog.Logger) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	desc, err := h.Describe(actx, client.WorkerDeploymentDescribeOptions{})
	var token []byte
	if err == nil {
		token = desc.ConflictToken
		cur := desc.Info.RoutingConfig.CurrentVersion
		switch {
		case cur != nil && cur.BuildID == d.BuildID:
			logger.Info("worker deployment version is current", "deployment", d.Name, "build_id", d.BuildID)
			return true, nil
		case cur != nil && d.SetCurrent == config.DeploymentSetCurrentIfNone:
			logger.Info("worker deployment version polling beside the current one; ramp or promote it with `temporal worker deployment`",
				"deployment", d.Name, "build_id", d.BuildID, "current_build_id", cur.BuildID)
			return true, nil
		}
	}
	// Not found (no version has polled yet) or no current version: set it,
	// with the token read, so two workers racing do not both set theirs.
	_, err = h.SetCurrentVersion(actx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: d.BuildID, ConflictToken: token})
	if err != nil {
		return false, err
	}
	logger.Info("worker deployment version made current", "deployment", d.Name, "build_id", d.BuildID)
	return true, nil
}
