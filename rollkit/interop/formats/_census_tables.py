"""The census tables (rollkit.interop.formats.census reads them): per format
and version, `path  fate  note` a line. `mapped` notes name the trace
field, `kept` notes the info key (`source`: kept by the census in
`info["source"]` under its source path), `dropped` notes say why."""

from __future__ import annotations

# The fields of one OpenAI-shaped chat message, under a prefix (`{p}`).
_CHAT = """
{p}.role                         mapped  the message's role (trace.messages)
{p}.content.**                   mapped  the content parts (text, reasoning, images) of the message
{p}.name                         mapped  the message's name
{p}.tool_call_id                 mapped  the tool result's call id (trace.messages)
{p}.tool_calls                   mapped  the reply's tool calls
{p}.tool_calls.*.id              mapped  the tool call's id
{p}.tool_calls.*.type            dropped always "function"
{p}.tool_calls.*.index           dropped the position in the list, which the list keeps
{p}.tool_calls.*.function.name   mapped  the tool call's name
{p}.tool_calls.*.function.arguments.**  mapped  the tool call's arguments, whole
{p}.tool_calls.*.name            mapped  the tool call's name
{p}.tool_calls.*.arguments.**    mapped  the tool call's arguments, whole
{p}.reasoning_content            mapped  the reply's reasoning (AssistantMessage.reasoning)
{p}.reasoning                    mapped  the reply's reasoning (AssistantMessage.reasoning)
{p}.thinking_blocks.**           kept    source (their thinking text is also AssistantMessage.reasoning)
{p}.function_call                dropped OpenAI's legacy single call, null in every file (tool_calls holds the calls)
{p}.provider_specific_fields.**  kept    source
{p}.refusal                      kept    source
"""

# One OpenAI / LiteLLM / Anthropic / DeepSeek / Gemini usage object (read by _usage.usage_of).
_USAGE = """
{p}.prompt_tokens                mapped  Usage.input_tokens
{p}.input_tokens                 mapped  Usage.input_tokens
{p}.completion_tokens            mapped  Usage.output_tokens
{p}.output_tokens                mapped  Usage.output_tokens
{p}.total_tokens                 dropped the sum of the prompt and the reply (Usage.total_tokens)
{p}.prompt_tokens_details.cached_tokens   mapped  Usage.cache_read_tokens
{p}.prompt_tokens_details.cache_creation_tokens  mapped  Usage.cache_write_tokens
{p}.prompt_tokens_details.audio_tokens    kept    source
{p}.prompt_tokens_details.text_tokens     kept    source
{p}.prompt_tokens_details.image_tokens    kept    source
{p}.prompt_tokens_details.video_tokens    kept    source
{p}.completion_tokens_details.image_tokens  kept  source
{p}.cost                         kept    source
{p}.cost_details.**              kept    source
{p}.is_byok                      kept    source
{p}.completion_tokens_details.reasoning_tokens  mapped  Usage.reasoning_tokens
{p}.completion_tokens_details.audio_tokens      kept    source
{p}.completion_tokens_details.text_tokens       kept    source
{p}.completion_tokens_details.accepted_prediction_tokens  kept  source
{p}.completion_tokens_details.rejected_prediction_tokens  kept  source
{p}.input_tokens_details.cached_tokens    mapped  Usage.cache_read_tokens
{p}.output_tokens_details.reasoning_tokens  mapped  Usage.reasoning_tokens
{p}.reasoning_tokens             mapped  Usage.reasoning_tokens
{p}.cached_tokens                mapped  Usage.cache_read_tokens
{p}.cache_read_input_tokens      mapped  Usage.cache_read_tokens
{p}.cache_creation_input_tokens  mapped  Usage.cache_write_tokens
{p}.cache_creation.**            kept    source
{p}.prompt_cache_hit_tokens      mapped  Usage.cache_read_tokens
{p}.prompt_cache_miss_tokens     dropped the prompt less its cache hits (prompt_tokens - prompt_cache_hit_tokens)
{p}.server_tool_use.**           kept    source
{p}.service_tier                 kept    source
{p}.promptTokenCount             mapped  Usage.input_tokens
{p}.candidatesTokenCount         mapped  Usage.output_tokens
{p}.cachedContentTokenCount      mapped  Usage.cache_read_tokens
{p}.thoughtsTokenCount           mapped  Usage.reasoning_tokens
{p}.totalTokenCount              dropped the sum of the prompt and the reply (Usage.total_tokens)
"""

# An OpenAI chat completion as LiteLLM returns it (mini-swe-agent's extra.response, tau2's raw_data).
_COMPLETION = """
{p}.id                           kept    source
{p}.created                      kept    source
{p}.model                        kept    source
{p}.object                       dropped always "chat.completion"
{p}.system_fingerprint           kept    source
{p}.service_tier                 kept    source
{p}.provider_specific_fields.**  kept    source
{p}.choices.*.index              dropped the position in the list (one choice)
{p}.choices.*.finish_reason      mapped  ModelCall.finish_reason
{p}.choices.*.native_finish_reason  kept  source
{p}.choices.*.error.**           kept    source
{p}.provider                     kept    source
{p}.choices.*.provider_specific_fields.**  kept  source
{p}.choices.*.logprobs.**        kept    source
{p}.choices.*.message.**         dropped the reply, which the trace's messages hold (the message beside it)
{p}.choices.*.message.reasoning_content  mapped  AssistantMessage.reasoning (where the message beside it has none)
{p}.choices.*.message.thinking_blocks.**  kept  source
{p}.choices.*.message.provider_specific_fields.**  kept  source
"""


def _with(prefix: str, *blocks: str) -> str:
    return "".join(block.replace("{p}", prefix) for block in blocks)


_MINI_SWE_AGENT = """
trajectory_format                mapped  info.trajectory_format
instance_id                      mapped  task.key (the file's name) and info.example_id
messages                         mapped  trace.messages
messages.*.extra.timestamp       mapped  ModelCall.end (a reply), the start of the next call
messages.*.extra.cost            mapped  ModelCall.cost_usd
messages.*.extra.actions.**      kept    source
messages.*.extra.raw_output      kept    source
messages.*.extra.returncode      kept    source
messages.*.extra.exception_info  kept    source
messages.*.extra.exit_status     mapped  the stop condition or error (info.exit_status)
messages.*.extra.submission      mapped  info.submission
messages.*.extra.exception_str   mapped  ErrorInfo.message
messages.*.extra.traceback       mapped  ErrorInfo.traceback
messages.*.extra.response        mapped  the model call of the reply
messages.*.extra.response.usage  mapped  ModelCall.usage
info.mini_version                kept    source
info.exit_status                 mapped  the stop condition or error (info.exit_status)
info.submission                  mapped  info.submission
info.exception_str               kept    source
info.traceback                   kept    source
info.model_stats.instance_cost   mapped  info.cost_usd (Trace.cost_usd) and metric cost
info.model_stats.api_calls       kept    source
info.config.model.model_name     mapped  agent.model
info.config.agent_type           mapped  agent.name
info.config.**                   kept    source
"""

_SWE_AGENT = """
history                          mapped  trace.messages
history.*.is_demo                mapped  info.demo_messages
history.*.agent                  kept    source
history.*.message_type           kept    source
history.*.thought                kept    source
history.*.action                 kept    source
history.*.tool_call_ids          mapped  the tool result's call id (trace.messages)
history.*.cache_control.**       dropped a prompt-caching marker the harness sent, no fact of the run
history.*.tags.**                kept    source
info.exit_status                 mapped  the stop condition or error (info.exit_status)
info.submission                  mapped  info.submission
info.model_stats.tokens_sent     mapped  info.source_usage.input_tokens
info.model_stats.tokens_received mapped  info.source_usage.output_tokens
info.model_stats.api_calls       mapped  info.source_usage.model_calls
info.model_stats.instance_cost   mapped  info.cost_usd (Trace.cost_usd) and metric cost
info.model_stats.total_cost      kept    source
info.edited_files30              kept    source
info.edited_files50              kept    source
info.edited_files70              kept    source
info.swe_agent_hash              kept    source
info.swe_agent_version           kept    source
info.swe_rex_hash                kept    source
info.swe_rex_version             kept    source
info.review.**                   kept    source
info.summarizer.**               kept    source
environment                      kept    source
replay_config.**                 kept    source
trajectory.*.execution_time      kept    source
trajectory.*.action              dropped the step's action, which the history's reply holds
trajectory.*.observation         dropped the step's output, which the history's tool or user message holds
trajectory.*.response            dropped the model's reply, which the history holds
trajectory.*.thought             dropped the reply's thought, which the history holds
trajectory.*.state.**            kept    source
trajectory.*.query.**            dropped the request sent for the step, the history up to it
trajectory.*.messages.**         dropped the request sent for the step, the history up to it
trajectory.*.extra_info.**       kept    source
"""

_TAU2 = """
timestamp                        kept    source
info.git_commit                  kept    source
info.num_trials                  kept    source
info.max_steps                   kept    source
info.max_errors                  kept    source
info.seed                        kept    source
info.agent_info.llm              mapped  agent.model
info.agent_info.**               kept    source
info.user_info.**                kept    source
info.environment_info.domain_name  mapped  task.type (tau2:<domain>) and info.domain
info.environment_info.policy     dropped the domain's policy text, the same for every task of the domain (tau2 ships it)
info.environment_info.tool_defs.**  dropped the domain's tool schemas, tau2's (the calls name their tools)
info.speech_complexity           kept    source
info.audio_native_config.**      kept    source
info.text_streaming_config.**    kept    source
info.retrieval_config.**         kept    source
info.retrieval_config_kwargs.**  kept    source
simulation_index.**              kept    source
tasks.*.id                       mapped  task.key
tasks.*.description.**           mapped  task.data.description
tasks.*.user_scenario.**         mapped  task.data.user_scenario
tasks.*.evaluation_criteria.**   kept    source
tasks.*.initial_state.**         kept    source
tasks.*.ticket                   kept    source
tasks.*.issues.**                kept    source
tasks.*.required_documents.**    kept    source
tasks.*.user_tools.**            kept    source
simulations                      mapped  one trace each
simulations.*.id                 mapped  info.simulation_id
simulations.*.task_id            mapped  task.key
simulations.*.trial              mapped  info.repeat
simulations.*.seed               kept    source
simulations.*.start_time         mapped  the agent phase's start
simulations.*.end_time           mapped  the agent phase's end
simulations.*.duration           kept    source
simulations.*.timestamp          kept    source
simulations.*.termination_reason mapped  the stop condition or error (info.termination_reason)
simulations.*.agent_cost         mapped  metric agent_cost and Trace.cost_usd
simulations.*.user_cost          mapped  metric user_cost
simulations.*.mode               kept    source
simulations.*.policy             dropped the domain's policy text again (info.environment_info.policy)
simulations.*.info.**            kept    source
simulations.*.review.**          kept    source
simulations.*.user_only_review.**  kept  source
simulations.*.auth_classification.**  kept  source
simulations.*.hallucination_check.**  kept  source
simulations.*.hallucination_retries_used  kept  source
simulations.*.provider_session_id  kept  source
simulations.*.effect_timeline.** kept    source
simulations.*.speech_environment.**  kept  source
simulations.*.ticks.**           kept    source
simulations.*.reward_info.reward mapped  reward
simulations.*.reward_info.reward_breakdown.{name}  mapped  metric reward.<part>
simulations.*.reward_info.reward_basis.**  kept  source
simulations.*.reward_info.db_check.**  kept  source
simulations.*.reward_info.env_assertions.**  kept  source
simulations.*.reward_info.action_checks.**  kept  source
simulations.*.reward_info.communicate_checks.**  kept  source
simulations.*.reward_info.nl_assertions.**  kept  source
simulations.*.reward_info.info.**  kept  source
simulations.*.messages           mapped  trace.messages (the agent's) and trace.user_turns (the user simulator's)
simulations.*.messages.*.id      kept    source
simulations.*.messages.*.requestor  mapped  whose tool call it is (the user's are left out, info.user_tool_calls)
simulations.*.messages.*.tool_calls.*.requestor  dropped  the same as the message's requestor
simulations.*.messages.*.error   mapped  info.tool_errors
simulations.*.messages.*.timestamp  mapped  ModelCall.end of a reply, the start of the next call
simulations.*.messages.*.generation_time_seconds  mapped  ModelCall.start (end - generation time)
simulations.*.messages.*.cost    mapped  ModelCall.cost_usd
simulations.*.messages.*.usage   mapped  ModelCall.usage
simulations.*.messages.*.raw_data  mapped  the model call of the reply
simulations.*.messages.*.raw_data.usage  mapped  ModelCall.usage
simulations.*.messages.*.raw_data.message.**  dropped the reply, which the trace's messages hold
simulations.*.messages.*.raw_data.message.reasoning_content  mapped  AssistantMessage.reasoning
simulations.*.messages.*.raw_data.message.thinking_blocks.**  kept  source (their thinking text is also AssistantMessage.reasoning)
simulations.*.messages.*.raw_data.message.provider_specific_fields.**  kept  source
simulations.*.messages.*.raw_data.role  dropped the reply's role again
simulations.*.messages.*.raw_data.index  dropped the position of the choice (one choice)
simulations.*.messages.*.raw_data.finish_reason  mapped  ModelCall.finish_reason
simulations.*.messages.*.raw_data.stop_reason  kept  source
simulations.*.messages.*.raw_data.thinking_blocks.**  kept  source (their thinking text is also AssistantMessage.reasoning)
simulations.*.messages.*.turn_idx  dropped the message's position in the conversation, which the order keeps
simulations.*.messages.*.turn_taking_action.**  kept  source
simulations.*.messages.*.utterance_ids.**  kept  source
simulations.*.messages.*.chunk_id  kept  source
simulations.*.messages.*.is_final_chunk  kept  source
simulations.*.messages.*.is_audio  kept  source
simulations.*.messages.*.audio_format.**  kept  source
simulations.*.messages.*.audio_path  kept  source
simulations.*.messages.*.audio_script_gold  kept  source
simulations.*.messages.*.audio_content  dropped base64 audio, too large to keep (audio_path names the file)
simulations.*.messages.*.contains_speech  kept  source
simulations.*.messages.*.source  kept  source
simulations.*.messages.*.channel_effects.**  kept  source
simulations.*.messages.*.source_effects.**  kept  source
simulations.*.messages.*.speech_effects.**  kept  source
"""

_VERIFIERS = """
example_id                       mapped  task.key and info.example_id
id                               mapped  task.key and info.example_id (older files)
prompt                           mapped  trace.messages (the opening)
completion                       mapped  trace.messages (the rollout)
answer                           mapped  task.data.answer
task                             mapped  task.type
info.**                          mapped  task.data.info, whole
reward                           mapped  reward
metrics.{name}                   mapped  metric <name>
{number}                         mapped  metric <name> (a reward function's score, files before `metrics`)
error.**                         mapped  ErrorInfo (type, message: error_chain_str)
timing.start_time                mapped  the phases' origin
timing.generation_ms             mapped  the agent phase
timing.scoring_ms                mapped  the scoring phase
timing.total_ms                  kept    source
timing.setup.**                  mapped  the setup phase
timing.generation.**             mapped  the agent phase
timing.scoring.**                mapped  the scoring phase
timing.model.spans.**            mapped  ModelCall.start / end
timing.**                        kept    source
generation_ms                    mapped  the agent phase (and info.timing_ms)
scoring_ms                       mapped  the scoring phase (and info.timing_ms)
total_ms                         kept    info.timing_ms
is_completed                     mapped  the outcome (incomplete when false)
is_truncated                     mapped  the stop condition "truncated"
stop_condition                   mapped  the stop condition
token_usage.**                   kept    info.token_usage (and info.source_usage)
prompt_tokens                    mapped  info.source_usage.input_tokens
completion_tokens                mapped  info.source_usage.output_tokens
error_chain                      kept    source
long_error_chain                 kept    source
tool_defs.**                     kept    source
trajectory.**                    kept    source
oai_tools.**                     kept    source
tools.**                         kept    source
state.**                         kept    source
"""
_VERIFIERS_CHAT = _with("prompt.*", _CHAT) + _with("completion.*", _CHAT)

_VERIFIERS_METADATA = """
env                              mapped  agent.name and task.type
env_id                           mapped  agent.name and task.type
model                            mapped  agent.model
sampling_args.**                 mapped  agent.sampling_args
{name}.**                        kept    info.run_metadata (the whole file)
"""

_VERIFIERS_V1 = """
id                               mapped  info.episode_id
task.**                          mapped  task (type, key, data)
env.id                           mapped  info.env
env.**                           kept    source
errors.**                        kept    source
ok                               kept    source
is_timeout                       kept    source
num_input_tokens                 kept    source
num_output_tokens                kept    source
num_total_tokens                 kept    source
traces                           mapped  one trace each
traces.*.id                      mapped  info.trace_id
traces.*.version                 mapped  info.trace_version
traces.*.verifiers.**            kept    source
traces.*.task.**                 mapped  task (type, key, data)
traces.*.agent.name              mapped  agent.name
traces.*.agent.config.model      mapped  agent.model
traces.*.agent.**                kept    source
traces.*.nodes                   mapped  trace.messages (the path from the root to the last node)
traces.*.nodes.*.message         mapped  the message
traces.*.nodes.*.parent          mapped  the path's order
traces.*.nodes.*.timestamp       kept    source
traces.*.nodes.*.sampled         kept    source
traces.*.nodes.*.is_content      kept    source
traces.*.nodes.*.mask.**         kept    source
traces.*.nodes.*.semantic_parents.**  kept  source
traces.*.nodes.*.token_ids.**    kept    source
traces.*.nodes.*.logprobs.**     kept    source
traces.*.calls.*.node            mapped  which reply the call made
traces.*.calls.*.model           mapped  agent.model
traces.*.calls.*.endpoint        kept    source
traces.*.calls.*.finish_reason   mapped  ModelCall.finish_reason
traces.*.calls.*.time.start      mapped  ModelCall.start
traces.*.calls.*.time.end        mapped  ModelCall.end
traces.*.calls.*.usage.prompt_tokens  mapped  Usage.input_tokens (plus the cached part)
traces.*.calls.*.usage.completion_tokens  mapped  Usage.output_tokens
traces.*.calls.*.usage.cached_input_tokens  mapped  Usage.cache_read_tokens
traces.*.calls.*.usage.**        kept    source
traces.*.calls.*.error.**        mapped  ErrorInfo of the failed call
traces.*.errors.**               mapped  trace.errors
traces.*.rewards.{name}.score    mapped  reward <name>
traces.*.rewards.{name}.weight   mapped  reward_weights
traces.*.metrics.{name}          mapped  metric <name>
traces.*.timing.boot.**          mapped  the boot phase
traces.*.timing.setup.**         mapped  the setup phase
traces.*.timing.agent.start      mapped  the agent phase
traces.*.timing.agent.end        mapped  the agent phase
traces.*.timing.finalize.**      mapped  the finalize phase
traces.*.timing.scoring.**       mapped  the scoring phase
traces.*.timing.**               kept    source
traces.*.is_completed            mapped  the outcome (incomplete when false)
traces.*.is_timeout              kept    source
traces.*.stop_condition          mapped  the stop condition
traces.*.ok                      kept    source
traces.*.extra_usage.**          kept    info.extra_usage
traces.*.num_input_tokens        kept    source
traces.*.num_output_tokens       kept    source
traces.*.num_total_tokens        kept    source
traces.*.request_rewrites.**     kept    source
traces.*.response_rewrites.**    kept    source
traces.*.info.**                 kept    source
traces.*.tools.**                kept    source
traces.*.mm_token_type_id_map.** kept    source
"""
_V1_CHAT = _with("traces.*.nodes.*.message", _CHAT)

_ATIF = """
schema_version                   mapped  info.schema_version
session_id                       mapped  task.key and info.session_id
notes                            kept    info.notes
extra.rollkit.**                 mapped  the trace rollkit wrote, read back whole
extra.**                         kept    source
agent.name                       mapped  agent.name
agent.model_name                 mapped  agent.model
agent.version                    mapped  agent.version
agent.extra.**                   kept    source
agent.tool_definitions.**        kept    source
steps                            mapped  trace.messages and the model calls
steps.*.step_id                  kept    source
steps.*.source                   mapped  the message's role
steps.*.message.**               mapped  the message's text or content parts
steps.*.reasoning_content        mapped  AssistantMessage.reasoning
steps.*.reasoning_effort         kept    source
steps.*.model_name               kept    source
steps.*.timestamp                mapped  ModelCall.end of an agent step
steps.*.is_copied_context        mapped  a message given to the model, not sampled (no model call)
steps.*.llm_call_count           mapped  0: a message no model call made (no model call)
steps.*.extra.**                 kept    source
steps.*.tool_calls.*.tool_call_id  mapped  the tool call's id
steps.*.tool_calls.*.function_name  mapped  the tool call's name
steps.*.tool_calls.*.arguments.**  mapped  the tool call's arguments, whole
steps.*.observation.results.*.source_call_id  mapped  the tool result's call id
steps.*.observation.results.*.content.**  mapped  the tool result's text
steps.*.observation.results.*.subagent_trajectory_ref.**  kept  source
steps.*.observation.**           kept    source
steps.*.metrics.prompt_tokens    mapped  Usage.input_tokens
steps.*.metrics.completion_tokens  mapped  Usage.output_tokens
steps.*.metrics.cached_tokens    mapped  Usage.cache_read_tokens
steps.*.metrics.cost_usd         mapped  ModelCall.cost_usd
steps.*.metrics.prompt_token_ids.**  mapped  TokenLogprobs.prompt_ids
steps.*.metrics.completion_token_ids.**  mapped  TokenLogprobs.ids
steps.*.metrics.logprobs.**      mapped  TokenLogprobs.logprobs
steps.*.metrics.extra.reasoning_tokens  mapped  Usage.reasoning_tokens
steps.*.metrics.extra.cache_creation_input_tokens  mapped  Usage.cache_write_tokens
steps.*.metrics.extra.**         kept    source
final_metrics.total_prompt_tokens  kept  info.final_metrics
final_metrics.total_completion_tokens  kept  info.final_metrics
final_metrics.total_cached_tokens  kept  info.final_metrics
final_metrics.total_cost_usd     mapped  info.cost_usd (Trace.cost_usd)
final_metrics.total_steps        kept    info.final_metrics
final_metrics.extra.**           kept    info.final_metrics
continued_trajectory_ref.**      kept    source
"""


_INSPECT = """
version                          dropped the log format's version (inspect's reader reads by it)
status                           kept    source
invalidated                      kept    source
tags.**                          kept    source
metadata.**                      kept    source
location                         dropped where inspect read the log from, the file rollkit read (info.file)
error.**                         kept    source
eval.task                        mapped  task.type (inspect:<task>) and info.eval_task
eval.run_id                      mapped  info.run_id
eval.model                       mapped  agent.model
eval.solver                      mapped  agent.name
eval.task_id                     kept    source
eval.eval_id                     kept    source
eval.eval_set_id                 kept    source
eval.created                     kept    source
eval.task_version                kept    source
eval.model_roles.**              kept    source
eval.dataset.sample_ids          dropped the ids of every sample of the eval; each trace has its own (info.sample_id)
eval.**                          kept    source
plan.**                          kept    source
results.**                       kept    source
stats.**                         kept    source
reductions.**                    dropped the epochs' reduced scores, each epoch's own scores are its trace's rewards
summaries.**                     dropped a summary of each sample the sample itself holds
_journal.**                      dropped inspect's write-ahead journal of the header and summaries
samples                          mapped  one trace per sample and epoch
samples.*.id                     mapped  task.key and info.sample_id
samples.*.epoch                  mapped  info.epoch and info.repeat
samples.*.uuid                   kept    source
samples.*.input.**               mapped  task.data.prompt
samples.*.target.**              mapped  task.data.target
samples.*.choices.**             kept    source
samples.*.messages               mapped  trace.messages
samples.*.messages.*.id          dropped inspect's message id, made for each message when the log is written
samples.*.messages.*.source      kept    source
samples.*.messages.*.metadata.** kept    source
samples.*.messages.*.internal.** kept    source
samples.*.messages.*.model       kept    source
samples.*.messages.*.function    mapped  the tool result's tool name
samples.*.messages.*.error.**    mapped  info.tool_errors
samples.*.messages.*.tool_calls.*.function  mapped  the tool call's name
samples.*.messages.*.tool_calls.*.arguments.**  mapped  the tool call's arguments, whole
samples.*.messages.*.tool_calls.*.parse_error  kept  source
samples.*.messages.*.tool_calls.*.view.**  dropped inspect's rendering of the call for its viewer
samples.*.messages.*.tool_calls.*.internal.**  kept  source
samples.*.messages.*.tool_calls.*.internal_name  kept  source
samples.*.messages.*.tool_calls.*.type  dropped always "function"
samples.*.messages.*.tool_calls.*.id  mapped  the tool call's id
samples.*.messages.*.content.**  mapped  the message's text or content parts
samples.*.messages.*.role        mapped  the message's role
samples.*.messages.*.tool_call_id  mapped  the tool result's call id
samples.*.output.model           kept    source
samples.*.output.choices.*.stop_reason  mapped  ModelCall.finish_reason (of the last call)
samples.*.output.choices.*.message.**  dropped the last reply, which the messages hold
samples.*.output.choices.*.logprobs.**  kept  source
samples.*.output.completion      dropped the last reply's text, which the messages hold
samples.*.output.usage.**        dropped the last call's usage, which its model event holds (ModelCall.usage)
samples.*.output.time            dropped the last call's time, which its model event holds
samples.*.output.metadata.**     kept    source
samples.*.output.error           kept    source
samples.*.output.input_context_tokens  kept  source
samples.*.scores.{name}.value.** mapped  reward <scorer> (several: metrics, info.scorers)
samples.*.scores.{name}.answer   kept    source
samples.*.scores.{name}.explanation  kept  source
samples.*.scores.{name}.metadata.**  kept  source
samples.*.scores.{name}.history.**  kept  source
samples.*.scores.{name}.scored_at  kept  source
samples.*.metadata.**            kept    source
samples.*.store.**               kept    source
samples.*.sandbox.**             kept    source
samples.*.files.**               kept    source
samples.*.setup                  kept    source
samples.*.model_usage.**         kept    info.source_usage
samples.*.role_usage.**          kept    source
samples.*.started_at             mapped  the agent phase's start (without spans)
samples.*.completed_at           mapped  the agent phase's end (without spans)
samples.*.total_time             kept    source
samples.*.working_time           mapped  metric working_time
samples.*.retries                kept    source
samples.*.error.**               mapped  trace.errors (the sample's error)
samples.*.error_retries.**       kept    source
samples.*.limit.**               mapped  the stop condition (<type> limit) and info.inspect_limit
samples.*.message_count          kept    source
samples.*.message_limit          kept    source
samples.*.token_limit            kept    source
samples.*.time_limit             kept    source
samples.*.working_limit          kept    source
samples.*.events_data.**         dropped the pooled request messages and calls the events point into (input_refs), the conversation again
samples.*.message_pool.**        dropped the pooled request messages the events point into (input_refs), the conversation again
samples.*.turn_count             kept    source
samples.*.attachments.**         dropped the texts inspect moved out of the events (attachment://), read from the events and messages
samples.*.events                 mapped  the model calls, phases and tool errors
samples.*.events.*.event         mapped  what kind of event (model, span, step, tool, ...)
samples.*.events.*.timestamp     mapped  ModelCall.start, a span's start or end
samples.*.events.*.completed     mapped  ModelCall.end
samples.*.events.*.span_id       mapped  which span (phase) the event is in
samples.*.events.*.id            mapped  a span's id
samples.*.events.*.parent_id     mapped  a span's parent
samples.*.events.*.type          mapped  a span's or step's kind
samples.*.events.*.name          mapped  a span's or step's name (init, solvers, scorers)
samples.*.events.*.action        mapped  a step's begin or end
samples.*.events.*.model         mapped  the model event's model (an agent or a grader call)
samples.*.events.*.output.usage.**  mapped  ModelCall.usage
samples.*.events.*.output.time   mapped  ModelCall.end
samples.*.events.*.output.choices.*.stop_reason  mapped  ModelCall.finish_reason
samples.*.events.*.output.**     dropped the call's reply, which the messages hold
samples.*.events.*.error.**      mapped  ErrorInfo of a failed call
samples.*.events.*.traceback     mapped  ErrorInfo.traceback
samples.*.events.*.traceback_ansi  dropped the traceback again, with terminal colours
samples.*.events.*.working_start kept    source
samples.*.events.*.working_time  kept    source
samples.*.events.*.uuid          kept    source
samples.*.events.*.call.**       dropped the raw API request and response (log_model_api): the conversation, the reply and its usage again
samples.*.events.*.call.time     kept    source
samples.*.events.*.call_started_at  kept  source
samples.*.events.*.call_completed_at  kept  source
samples.*.events.*.call_working_start  kept  source
samples.*.events.*.call_working_time  kept  source
samples.*.events.*.call_retries  kept    source
samples.*.events.*.call_id       kept    source
samples.*.events.*.retries       kept    source
samples.*.events.*.http_retries  kept    source
samples.*.events.*.attempt       kept    source
samples.*.events.*.cache         kept    source
samples.*.events.*.input.**      dropped the request's messages, the conversation up to the call (trace.messages)
samples.*.events.*.input_refs.** dropped the request's messages by reference (trace.messages)
samples.*.events.*.input_ansi    dropped terminal output with colours, the same text as input
samples.*.events.*.tools.**      dropped the tool schemas sent with each request, inspect's task's
samples.*.events.*.tool_choice.**  dropped the tool choice sent with each request
samples.*.events.*.config.**     kept    source
samples.*.events.*.function      mapped  a tool event's tool (info.tool_errors)
samples.*.events.*.arguments.**  mapped  the tool call's arguments, which the messages hold
samples.*.events.*.result.**     dropped the tool's result, which the tool message holds
samples.*.events.*.message_id    kept    source
samples.*.events.*.view.**       dropped inspect's rendering of a tool call for its viewer
samples.*.events.*.events.**     dropped a tool event's own sub-events, the same events again
samples.*.events.*.changes.**    kept    source
samples.*.events.*.state.**      kept    source
samples.*.events.*.sample.**     dropped the sample as the sample-init event saw it (the sample itself)
samples.*.events.*.score.**      mapped  the scores (samples.*.scores)
samples.*.events.*.scorer        kept    source
samples.*.events.*.scorer_args.**  kept  source
samples.*.events.*.intermediate  kept    source
samples.*.events.*.target.**     dropped the target again (samples.*.target)
samples.*.events.*.message       kept    source
samples.*.events.*.data.**       kept    source
samples.*.events.*.source        kept    source
samples.*.events.*.level         kept    source
samples.*.events.*.filename      kept    source
samples.*.events.*.module        kept    source
samples.*.events.*.lineno        kept    source
samples.*.events.*.created       kept    source
samples.*.events.*.limit.**      kept    source
samples.*.events.*.cmd           kept    source
samples.*.events.*.file          kept    source
samples.*.events.*.options.**    kept    source
samples.*.events.*.model_usage.**  kept  source
samples.*.events.*.pending       kept    source
samples.*.events.*.metadata.**   kept    source
samples.*.events.*.agent         kept    source
samples.*.events.*.failed        kept    source
samples.*.events.*.role          kept    source
samples.*.events.*.content.**    kept    source
samples.*.events.*.checkpoint_id  kept   source
samples.*.events.*.input_ids.**  kept    source
samples.*.events.*.result_ids.** kept    source
samples.*.events.*.output_ids.** kept    source
samples.*.events.*.approver      kept    source
samples.*.events.*.decision      kept    source
samples.*.events.*.explanation   kept    source
samples.*.events.*.modified.**   kept    source
samples.*.events.*.answer        kept    source
samples.*.events.*.user          kept    source
samples.*.events.*.truncated.**  kept    source
samples.*.events.*.task          kept    source
samples.*.events.*.interactive   kept    source
samples.*.events.*.stop          kept    source
samples.*.events.*.error_retries.**  kept  source
samples.*.events.*.role_usage.** kept    source
samples.*.events.*.agent_span_id kept    source
samples.*.events.*.internal.**   kept    source
samples.*.transcript.**          mapped  the model calls and phases of logs before `events` (inspect migrates them)
samples.*.score.**               mapped  the reward of logs before `scores` (inspect migrates it)
"""

TABLES: dict[str, tuple[str, str]] = {
    "inspect": ("inspect-ai eval logs, log format version 1-2 (.json whole; .eval: header.json, samples/, "
                "reductions.json, summaries.json, _journal/), inspect-ai 0.3.x", _INSPECT),
    "mini-swe-agent": ("mini-swe-agent 1.x-2.x .traj.json (trajectory_format mini-swe-agent-1.0, -1.1)",
                       _MINI_SWE_AGENT + _with("messages.*", _CHAT)
                       + _with("messages.*.extra.response", _COMPLETION)
                       + _with("messages.*.extra.response.usage", _USAGE)),
    "swe-agent": ("SWE-agent 0.x-1.x .traj (history, trajectory, info, replay_config)",
                  _SWE_AGENT + _with("history.*", _CHAT)),
    "tau2": ("tau2-bench results.json (one file, and the folder layout's results.json + simulations/*.json; "
             "tau2 0.x to the τ³ layout with ticks)",
             _TAU2 + _with("simulations.*.messages.*", _CHAT)
             + _with("simulations.*.messages.*.raw_data", _COMPLETION)
             + _with("simulations.*.messages.*.raw_data.usage", _USAGE)
             + _with("simulations.*.messages.*.usage", _USAGE)),
    "verifiers": ("verifiers results.jsonl, 0.1 (top-level reward columns) to its legacy writer of 2026 "
                  "(state_to_output: metrics, timing spans, token_usage, tool_defs, error_chain)",
                  _VERIFIERS + _VERIFIERS_CHAT),
    "verifiers-metadata": ("verifiers metadata.json beside results.jsonl", _VERIFIERS_METADATA),
    "verifiers-v1": ("verifiers v1 traces.jsonl (TRACE_VERSION 1)", _VERIFIERS_V1 + _V1_CHAT),
    "atif": ("Harbor ATIF trajectory.json, ATIF-v1.0 to v1.6", _ATIF),
}
