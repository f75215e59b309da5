package agentclient

import (
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// GitCredentials encodes c for a Checkout request (the agent decodes it back
// into gitauth.Credentials). The message holds secret values: a request
// carrying it is never logged, and no error quotes it.
func GitCredentials(c gitauth.Credentials) *agentv1.GitCredentials {
	out := &agentv1.GitCredentials{Token: c.Token, Username: c.Username, Password: c.Password,
		SshPrivateKey: c.SSHPrivateKey, KnownHosts: c.KnownHosts}
	if app := c.GitHubApp; app != nil {
		out.GithubApp = &agentv1.GitHubAppCredentials{AppId: app.AppID, InstallationId: app.InstallationID,
			PrivateKey: app.PrivateKey, ApiUrl: app.APIURL}
	}
	return out
}
