-- Workspaces: the document (apitype.Workspace) beside its times. The default workspace is written by Open.
CREATE TABLE workspaces (
	id          text        PRIMARY KEY,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE INDEX workspaces_created ON workspaces (created_at, id);

-- owners: the workspace of each resource, by the resource's id (ids are unique across kinds: each kind has its
-- prefix). A resource with no row here belongs to the default workspace.
CREATE TABLE owners (
	id           text PRIMARY KEY,
	workspace_id text NOT NULL
);
CREATE INDEX owners_workspace ON owners (workspace_id, id);

-- An API key belongs to a workspace ('' is an organization admin key) and can be turned off and on.
ALTER TABLE api_keys ADD COLUMN workspace_id text NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN inactive boolean NOT NULL DEFAULT false;

-- Environment names are unique within a workspace: the name column is the workspace's id, a slash and the name.
-- The environments written before workspaces are the default workspace's.
UPDATE environments SET name = 'wrkspc_default/' || name WHERE name IS NOT NULL;

-- Token buckets of the workspaces' fair shares, shared by every process: the tokens left and the time of the
-- last take.
CREATE TABLE rate_buckets (
	key    text             PRIMARY KEY,
	tokens double precision NOT NULL,
	at     timestamptz      NOT NULL,
	taken  boolean          NOT NULL
);

-- Counted slots shared by every process (store.SlotStore): a workspace's live sandboxes, each until its lease
-- ends.
CREATE TABLE slots (
	id         text        PRIMARY KEY,
	grp        text        NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX slots_group ON slots (grp, expires_at);
