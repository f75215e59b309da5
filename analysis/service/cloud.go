package service

import (
	"context"

	"github.com/stackflow-io/stackflow/analysis/server"
)

func newCloud(ctx context.Context, o Options) (server.Cloud, error) {
	if o.PulumiCloudTokenSecret == "" {
		return nil, nil
	}
	return newPulumiCloud(ctx, o)
}
