"""Sample test cases over the demo servers (`shared.demo.catalog`), as plain data.

Each `DemoCase` maps one-to-one onto the REST body of `POST /test-cases` (`DemoCase.as_request_body()`).
`expected_parameters` values are literals or matchers of mcpeval's matcher language, as read by the scorer:

- `{"$oneOf": [a, b]}`: the value matches any of the alternatives;
- `{"$optional": v}`: the key may be missing; when present its value must match `v`;
- `{"$any": true}`: the key must be present, any value;
- `{"$absent": true}`: the key must NOT be present (e.g. no filter on "show all my todos");
- `{"$regex": "..."}`: a string the whole of which the pattern matches (`re.fullmatch`);
- `{"$approx": x, "$tol": t}`: a number within `t` of `x`;
- `{"$unordered": [...]}`: a list with these elements in any order;
- `{"$exact": "..."}`: a string compared verbatim (no case/space/Unicode normalisation).

Most queries share words with the right tool's name, description or parameter names, so the lexical `baseline`
provider can answer them; the cases tagged `hard` need world knowledge or paraphrase, and the `no_tool` ones
(chit-chat, out-of-scope requests) expect no tool at all. Cases tagged `server_choice` offer two servers where
only one is right; those tagged `collision` offer both `github` and `jira`, which both define `get_issue`.
"""

from __future__ import annotations

from typing import Any

import msgspec


class DemoCase(msgspec.Struct, frozen=True, kw_only=True):
    """One sample test case; `expected_*` are all None when no tool should be called."""

    name: str
    query: str
    expected_mcp_server_name: str | None
    expected_tool_name: str | None
    expected_parameters: dict[str, Any] | None
    available_mcp_servers: list[str]
    tags: tuple[str, ...] = ()
    """Descriptive labels (`no_tool`, `hard`, `server_choice`, `collision`, `params`); not sent to the API."""

    def as_request_body(self) -> dict[str, Any]:
        """The JSON body for `POST /test-cases`."""
        return {
            "name": self.name,
            "query": self.query,
            "expected_mcp_server_name": self.expected_mcp_server_name,
            "expected_tool_name": self.expected_tool_name,
            "expected_parameters": self.expected_parameters,
            "available_mcp_servers": list(self.available_mcp_servers),
        }


def _case(
    name: str,
    query: str,
    server: str,
    tool: str,
    parameters: dict[str, Any] | None,
    available: list[str] | None = None,
    tags: tuple[str, ...] = (),
) -> DemoCase:
    return DemoCase(
        name=name,
        query=query,
        expected_mcp_server_name=server,
        expected_tool_name=tool,
        expected_parameters=parameters,
        available_mcp_servers=available or [server],
        tags=tags,
    )


def _no_tool(name: str, query: str, available: list[str], tags: tuple[str, ...] = ()) -> DemoCase:
    return DemoCase(
        name=name,
        query=query,
        expected_mcp_server_name=None,
        expected_tool_name=None,
        expected_parameters=None,
        available_mcp_servers=available,
        tags=("no_tool", *tags),
    )


DEMO_CASES: list[DemoCase] = [
    # ------------------------------------------------------------------------------------------------------ rag
    _case(
        "rag: basic vector search",
        "Using basic vector similarity search, what are the common symptoms of type 2 diabetes?",
        "rag",
        "rag_basic",
        {"query": {"$regex": "(?is).*symptoms.*diabetes.*"}, "top_k": {"$optional": 5}},
    ),
    _case(
        "rag: reranked passages with sources",
        "Retrieve the top 10 passages about insulin resistance, reranked for precision, and include sources.",
        "rag",
        "rag_basic_rerank",
        {"query": {"$regex": "(?is).*insulin resistance.*"}, "top_k": 10, "include_sources": True},
        tags=("params",),
    ),
    _case(
        "rag: corrective RAG with threshold",
        "Use corrective RAG to find the recommended HbA1c target for elderly patients; correct the retrieval "
        "when confidence is below 0.9 by rewriting the query.",
        "rag",
        "rag_crag",
        {
            "query": {"$regex": "(?is).*hba1c.*"},
            "confidence_threshold": {"$approx": 0.9, "$tol": 0.001},
            "correction_strategy": "rewrite",
        },
        tags=("params",),
    ),
    _case(
        "rag: graph of connected entities",
        "How are metformin, lactic acidosis and kidney function connected? Follow the relationships between "
        "these entities in the knowledge graph.",
        "rag",
        "rag_graphrag",
        {"query": {"$any": True}},
    ),
    _case(
        "rag: exact phrase with ColBERT",
        "Find passages with the exact phrase 'glomerular filtration rate' using ColBERT token-level matching "
        "with an interaction threshold of 0.7.",
        "rag",
        "rag_pylate_colbert",
        {
            "query": {"$regex": "(?is).*glomerular filtration rate.*"},
            "interaction_threshold": {"$approx": 0.7, "$tol": 0.01},
        },
        tags=("params",),
    ),
    _case(
        "rag: global themes overview",
        "Give me a global overview of the main themes across the entire document collection.",
        "rag",
        "rag_iris_global_graphrag",
        {"query": {"$any": True}, "include_metadata": {"$optional": False}},
    ),
    _case(
        "rag (hard): big-picture question without pipeline words",
        "Across everything we have indexed, what are the recurring topics researchers keep coming back to?",
        "rag",
        "rag_iris_global_graphrag",
        {"query": {"$any": True}},
        tags=("hard",),
    ),
    # ----------------------------------------------------------------------------------------------------- todo
    _case(
        "todo: create with priority and tags",
        "Create a todo to buy groceries with priority 2 and tags shopping and errands.",
        "todo",
        "create_todo",
        {
            "title": {"$regex": "(?is).*buy groceries.*"},
            "priority": 2,
            "tags": {"$unordered": ["shopping", "errands"]},
        },
        tags=("params",),
    ),
    _case(
        "todo: create with exact title and due date",
        "Create a new todo item titled 'Renew passport' with due date 2026-03-15.",
        "todo",
        "create_todo",
        {"title": {"$exact": "Renew passport"}, "due_date": "2026-03-15", "priority": {"$absent": True}},
        tags=("params",),
    ),
    _case(
        "todo: list completed",
        "List my todos filtered by status: completed.",
        "todo",
        "list_todos",
        {"status": "completed"},
    ),
    _case(
        "todo: list everything unfiltered",
        "List all my todos.",
        "todo",
        "list_todos",
        {"status": {"$absent": True}, "priority": {"$absent": True}, "tags": {"$absent": True}},
    ),
    _case(
        "todo: list high priority",
        "List my todos filtered by priority, only the high priority ones.",
        "todo",
        "list_todos",
        {"priority": {"$oneOf": [4, 5]}},
    ),
    _case(
        "todo: update status by id",
        "Update todo 42: set its status to completed.",
        "todo",
        "update_todo",
        {"todo_id": 42, "status": "completed"},
    ),
    _case(
        "todo: search by keyword",
        "Search my todos for the keyword dentist.",
        "todo",
        "search_todos",
        {"query": {"$regex": "(?i)^\\s*dentist\\s*$"}},
    ),
    _case(
        "todo: delete by id",
        "Delete todo 17.",
        "todo",
        "delete_todo",
        {"todo_id": 17},
    ),
    # --------------------------------------------------------------------------------------------------- github
    _case(
        "github: list commits on a branch",
        "List the last 20 commits on the main branch of the octocat/hello-world repository.",
        "github",
        "list_commits",
        {
            "owner": "octocat",
            "repo": "hello-world",
            "sha": {"$oneOf": ["main", "refs/heads/main"]},
            "per_page": 20,
        },
        tags=("params",),
    ),
    _case(
        "github: commits touching a path since a date",
        "Which commits changed the file path src/auth/login.py in acme/webapp since 2025-11-01?",
        "github",
        "list_commits",
        {"owner": "acme", "repo": "webapp", "path": "src/auth/login.py", "since": {"$regex": "2025-11-01.*"}},
        tags=("params",),
    ),
    _case(
        "github: open pull requests",
        "Show the open pull requests in the kubernetes/kubernetes repository.",
        "github",
        "list_pull_requests",
        {"owner": "kubernetes", "repo": "kubernetes", "state": {"$optional": "open"}},
    ),
    _case(
        "github: get a file",
        "Get the file README.md from the psf/requests repository.",
        "github",
        "get_file",
        {"owner": "psf", "repo": "requests", "path": "README.md", "ref": {"$absent": True}},
    ),
    _case(
        "github: search repositories",
        "Search GitHub repositories for Python web frameworks, sorted by stars.",
        "github",
        "search_repositories",
        {"query": {"$regex": "(?is).*python.*"}, "sort": "stars"},
    ),
    # ----------------------------------------------------------------------------------------------------- jira
    _case(
        "jira: search with JQL",
        "Search Jira for open bugs in project PAY.",
        "jira",
        "search_issues",
        {"jql": {"$regex": "(?is)(?=.*\\bPAY\\b)(?=.*\\bbug\\b).*"}},
    ),
    _case(
        "jira: create a bug with priority and labels",
        "Create a Jira bug in project WEB with summary 'Login button unresponsive on Safari', priority High and "
        "labels frontend and safari.",
        "jira",
        "create_issue",
        {
            "project_key": "WEB",
            "summary": {"$regex": "(?is).*login button unresponsive.*"},
            "issue_type": "Bug",
            "priority": "High",
            "labels": {"$unordered": ["frontend", "safari"]},
        },
        tags=("params",),
    ),
    _case(
        "jira: transition to done",
        "Transition Jira issue OPS-88 to Done.",
        "jira",
        "transition_issue",
        {"issue_key": "OPS-88", "transition": "Done"},
    ),
    _case(
        "jira: add a comment",
        "Add a comment to Jira issue API-7 saying the fix is deployed to staging.",
        "jira",
        "add_comment",
        {"issue_key": "API-7", "body": {"$regex": "(?is).*deployed to staging.*"}},
    ),
    # ------------------------------------------------------------------------------------------------------ aws
    _case(
        "aws: list buckets in a region",
        "List all S3 buckets in region us-east-1.",
        "aws",
        "list_s3_buckets",
        {"region": "us-east-1", "prefix": {"$absent": True}},
    ),
    _case(
        "aws: running instances",
        "Describe the running EC2 instances in eu-west-1 tagged env=prod.",
        "aws",
        "describe_ec2_instances",
        {"region": "eu-west-1", "state": "running", "tag_filters": {"env": "prod"}},
        tags=("params",),
    ),
    _case(
        "aws: IAM users under a path",
        "List the IAM users under the path /engineering/.",
        "aws",
        "list_iam_users",
        {"path_prefix": "/engineering/"},
    ),
    _case(
        "aws: monthly cost by service",
        "Get our AWS cost and usage grouped by service from 2025-10-01 to 2025-11-01.",
        "aws",
        "get_cost_and_usage",
        {
            "start_date": "2025-10-01",
            "end_date": "2025-11-01",
            "group_by": "SERVICE",
            "granularity": {"$optional": "MONTHLY"},
        },
        tags=("params",),
    ),
    _case(
        "aws (hard): firing alarms in plain words",
        "Is anything paging right now? Show me what's currently firing in our monitoring.",
        "aws",
        "list_cloudwatch_alarms",
        {"state": "ALARM"},
        tags=("hard",),
    ),
    _case(
        "aws (hard): servers in a city",
        "Which of our virtual machines in Frankfurt are up at the moment?",
        "aws",
        "describe_ec2_instances",
        {"region": "eu-central-1", "state": "running"},
        tags=("hard",),
    ),
    # -------------------------------------------------------------------------- two servers, only one is right
    _case(
        "collision: GitHub issue by number",
        "Get GitHub issue #1234 in the python/cpython repository.",
        "github",
        "get_issue",
        {"owner": "python", "repo": "cpython", "issue_number": 1234},
        available=["github", "jira"],
        tags=("server_choice", "collision"),
    ),
    _case(
        "collision: Jira issue by key",
        "Get the Jira issue PROJ-123 and show its status and assignee.",
        "jira",
        "get_issue",
        {"issue_key": "PROJ-123"},
        available=["github", "jira"],
        tags=("server_choice", "collision"),
    ),
    _case(
        "server choice: Jira task, not a personal todo",
        "Create a Jira task in project OPS to rotate the database credentials.",
        "jira",
        "create_issue",
        {"project_key": "OPS", "issue_type": "Task", "summary": {"$regex": "(?is).*rotate.*credentials.*"}},
        available=["todo", "jira"],
        tags=("server_choice", "params"),
    ),
    _case(
        "server choice: personal todo, not a Jira issue",
        "Create a todo for me to call the plumber.",
        "todo",
        "create_todo",
        {"title": {"$regex": "(?is).*plumber.*"}},
        available=["todo", "jira"],
        tags=("server_choice",),
    ),
    _case(
        "server choice (hard): document question next to code search",
        "What does our clinical literature say about the side effects of statins?",
        "rag",
        "rag_basic",
        {"query": {"$regex": "(?is).*statin.*"}},
        available=["rag", "github"],
        tags=("server_choice", "hard"),
    ),
    # --------------------------------------------------------------------------------------- no tool expected
    _no_tool("no tool: greeting", "Hi there! How are you doing today?", ["todo"]),
    _no_tool("no tool: joke", "Tell me a joke about penguins.", ["rag"]),
    _no_tool(
        "no tool: weather", "What's the weather going to be like in Paris tomorrow?", ["github", "jira"]
    ),
    _no_tool("no tool: translation", "Translate 'good morning' into Spanish.", ["aws"]),
    _no_tool(
        "no tool: restaurant booking", "Book a table for two at an Italian restaurant on Friday.", ["todo"]
    ),
    _no_tool(
        "no tool (hard): concept question with tool words",
        "Conceptually, what is a pull request and why do teams use them for code review?",
        ["github"],
        tags=("hard",),
    ),
]
"""The sample suite, in a stable order; case names are unique."""
