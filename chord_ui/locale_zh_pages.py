"""Simplified Chinese for the Batch, History and GPUs pages, the statement check, and the
words the pages look up at run time (job states, table columns, verdicts). Merged with
``locale_zh.ZH`` in ``chord_ui.i18n``; the same rules hold (placeholders kept, checked by
``tests/app/test_i18n.py``)."""

from __future__ import annotations

ZH_PAGES: dict[str, str] = {
    # words looked up at run time: job states, filters, table columns
    "All": "全部", "Done": "完成", "Failed": "失败", "Cancelled": "已取消",
    "queued": "排队中", "running": "运行中", "done": "完成", "failed": "失败",
    "cancelled": "已取消", "skipped": "已跳过",
    "time": "时间", "clip": "视频", "task": "任务", "query": "查询", "model": "模型",
    "state": "状态", "duration": "用时", "worker": "工作进程", "stage": "阶段",
    "elapsed": "已用时间", "progress": "进度", "devices": "设备", "job": "作业",
    "tasks done": "完成任务数", "busy": "忙碌时间", "restarts": "重启次数",
    "ready in": "就绪用时", "about {d} left": "约剩 {d}", "name": "名称", "memory": "显存", "temp °C": "温度 °C",
    "power": "功率", "processes": "进程数",
    # History
    "Show": "显示", "Page": "页",
    " · {n} unfinished: refreshed every {s} s": " · {n} 个未完成：每 {s} 秒刷新",
    "Nothing here yet. Analyses you run on the Analyze or Batch page appear here, newest "
    "first.": "这里还没有内容。在“分析”或“批量”页面运行的分析会显示在这里，最新的在前。",
    "{total} analyses · page {page} of {pages} · {order} · stored in `{path}`":
        "{total} 个分析 · 第 {page} 页，共 {pages} 页 · {order} · 保存在 `{path}`",
    "1 analysis · page {page} of {pages} · {order} · stored in `{path}`":
        "1 个分析 · 第 {page} 页，共 {pages} 页 · {order} · 保存在 `{path}`",
    "No analysis matches these filters.": "没有符合这些筛选条件的分析。",
    "All tasks": "全部任务", "File name contains": "文件名包含", "Sort": "排序",
    "Newest first": "最新的在前", "Oldest first": "最早的在前", "Longest first": "用时最长的在前",
    "Previous": "上一页", "Next": "下一页", "page {page} of {pages}": "第 {page} 页，共 {pages} 页",
    "summary": "摘要", "{n} chapter(s)": "{n} 个章节", "search": "搜索", "batch": "批量",
    "Batch (API)": "批量（API）",
    "The link names a batch ({job}), not one clip: its clips and their results are in "
    "History, inside the batch's row.": "链接指向一个批量任务（{job}），而不是单个视频：它的视频和结果在“历史”页面该批量任务的行中。",
    # worker states and why no GPU is charted (chord_core's words)
    "starting": "启动中", "ready": "就绪", "restarting": "重启中", "stopped": "已停止",
    "{package} not installed ({cmd})": "未安装 {package}（{cmd}）",
    "no NVIDIA GPU found": "未找到 NVIDIA GPU",
    "NVML could not initialise: {err} (no NVIDIA driver?)":
        "NVML 无法初始化：{err}（没有 NVIDIA 驱动？）",
    "Select a clip to open its result in Analyze.": "选择一个片段，可在“分析”中打开其结果。",
    "This clip has no result yet ({state}).": "此片段还没有结果（{state}）。",
    "Select a finished clip to open its result in Analyze.":
        "选择一个已完成的片段，可在“分析”中打开其结果。",
    "Open {name} in Analyze": "在“分析”中打开 {name}",
    "running: {done} of {total} finished": "运行中：{total} 个中已结束 {done} 个",
    "{n} clip(s) described": "已描述 {n} 个视频",
    "{n} clip(s) searched for “{query}”": "已在 {n} 个视频中查找“{query}”",
    "{n} analysed": "已分析 {n} 个", "{n} failed": "{n} 个失败", "{n} cancelled": "{n} 个已取消",
    "{n} reused from earlier runs": "{n} 个沿用之前的结果",
    "waiting in the queue": "排队等待中", "still running": "仍在运行",
    "cancelled before a result": "在出结果前已取消", "no result stored": "没有保存的结果",
    "Select a row to open it in Analyze, read its error, or delete it.":
        "选择一行，可在“分析”中打开、查看错误或删除。",
    "model {name}": "模型 {name}", "worker {name}": "工作进程 {name}", "batch {id}": "批次 {id}",
    "Prompt": "提示词",
    "The video file at {path} is gone or outside the media roots; the stored result can "
    "still be opened (without frames).":
        "位于 {path} 的视频文件已不存在或不在媒体根目录下；保存的结果仍可打开（不含画面）。",
    "This analysis was cancelled.": "此分析已取消。",
    "Cancelled. **Partial result**: the frames finished before Cancel are kept.":
        "已取消。**部分结果**：取消前已完成的帧会保留。",
    "Still in progress; its result will be kept here when it finishes.":
        "仍在进行中；完成后结果会保存在这里。",
    "Open in Analyze": "在“分析”中打开", "Delete…": "删除…",
    "Delete this analysis and its stored result? This cannot be undone.":
        "删除此分析及其保存的结果？此操作无法撤销。",
    "Yes, delete": "是，删除", "Keep it": "保留", "Deleted the analysis of {name}.":
        "已删除 {name} 的分析。",
    # progress
    "Cancelled — keeping the frames finished so far…": "已取消 — 正在保留已完成的帧…",
    # Batch
    "Upload videos": "上传视频", "Many files at once: mp4, avi, mov, mkv or webm":
        "可一次上传多个文件：mp4、avi、mov、mkv 或 webm",
    "…and/or a folder on this machine": "…和/或本机上的文件夹",
    "Every video file in the folder and its subfolders is queued; the folder must be under "
    "the media roots (CHORD_MEDIA_ROOTS) on the machine running Chord: {roots}.":
        "文件夹及其子文件夹中的每个视频文件都会排队；该文件夹必须位于运行 Chord 的机器的"
        "媒体根目录（CHORD_MEDIA_ROOTS）下：{roots}。",
    "Only the first {n} videos are listed (at most {max}, {depth} folder levels deep); "
    "choose a smaller folder for the rest.":
        "只列出了前 {n} 个视频（最多 {max} 个，最深 {depth} 层文件夹）；其余的请选择更小的文件夹。",
    "Add videos: upload them, or give a folder path for big local files.":
        "添加视频：上传，或为较大的本地文件填写文件夹路径。",
    "**{n} clips** ready to queue": "**{n} 个视频**可以排队",
    "**{n} clip** ready to queue": "**{n} 个视频**可以排队",
    "{size} uploaded": "已上传 {size}", " and {n} more": " 等另外 {n} 个",
    "Queue {n} clips": "排队 {n} 个视频", "Queue {n} clip": "排队 {n} 个视频", "Queue": "排队",
    "A batch is running; a new one queues behind it.": "已有批次在运行；新的批次会排在它后面。",
    "The workers are loading the model; clips start as soon as it is ready.":
        "工作进程正在加载模型；模型就绪后视频立即开始。",
    "Cancel all": "全部取消", "Download results (ZIP)": "下载结果（ZIP）",
    "One chord.result/v1 JSON per clip that has a result, plus summary.json (states, "
    "workers, busy time, speed-up).":
        "每个有结果的视频一个 chord.result/v1 JSON 文件，外加 summary.json"
        "（状态、工作进程、忙碌时间、加速比）。",
    "Ground “{query}”": "定位“{query}”",
    "{id} · model {model} · {n} clips": "{id} · 模型 {model} · {n} 个视频",
    "Skipped": "已跳过", "Throughput": "吞吐量", "{n}/min": "{n}/分钟", "Speed-up": "加速比",
    "Already analysed with the same settings: the stored result is reused.":
        "已用相同设置分析过：直接复用保存的结果。",
    "Clips analysed per minute since the batch began.": "自批次开始以来每分钟分析的视频数。",
    "Σ worker busy time / wall time since the batch began: how many workers were kept busy "
    "on average (shown once a clip is done).":
        "Σ 工作进程忙碌时间 / 自批次开始以来的实际时间：平均有多少个工作进程在忙（有视频完成后显示）。",
    "{finished} of {total} clips finished · running for {time}":
        "{total} 个视频中已结束 {finished} 个 · 已运行 {time}",
    "{finished} of {total} clips finished · took {time}":
        "{total} 个视频中已结束 {finished} 个 · 用时 {time}",
    "Analysed": "已分析", "one worker": "单个工作进程",
    "Clips of this batch analysed now, of all its clips (failed and skipped ones are counted "
    "beside it; all finished ones in the bar below).":
        "本批次中这次分析的视频数 / 全部视频数（失败和跳过的另行计数；所有已结束的见下方进度条）。",
    "Workers": "工作进程", "Failed clips": "失败的视频",
    # GPUs
    "Host": "主机", "Worker plan": "工作进程计划", "Utilisation": "利用率", "utilisation": "利用率",
    "Memory used": "已用显存", "memory used": "已用显存", "Temperature": "温度", "Power": "功率",
    "RAM used": "已用内存",
    "Chord's model runs in {n} worker process(es); each loads the model once and takes jobs "
    "from the shared queue.": "Chord 的模型运行在 {n} 个工作进程中；每个进程只加载一次模型，"
                              "并从共享队列中领取作业。",
    "No NVIDIA GPU to show: {reason}. Charting CPU and RAM instead.":
        "没有可显示的 NVIDIA GPU：{reason}。改为绘制 CPU 和内存图表。",
    "Collecting the first GPU readings…": "正在收集首批 GPU 读数…",
    "No compute processes on the GPUs right now.": "GPU 上目前没有计算进程。",
    "Processes on the GPUs": "GPU 上的进程", "Cluster nodes": "集群节点",
    # Check a statement
    "entailment": "成立", "neutral": "无法判断", "contradiction": "矛盾",
    "frame": "帧", "verdict": "判定",
    "holds": "成立", "is contradicted": "被否定", "cannot be told from the clip": "无法从视频判断",
    "“{statement}” {verdict} (p = {p}{where})": "“{statement}”{verdict}（p = {p}{where}）",
    ", first at {t} s": "，最早在 {t} 秒",
    "This result has no statement check.": "此结果没有陈述检查。",
    "**Test model — random weights**: these probabilities are meaningless; they only show "
    "that the pipeline works.": "**测试模型 — 随机权重**：这些概率没有意义，只说明流程可以运行。",
    "overall probability (see the verdict rule in the README)":
        "总体概率（判定规则见说明文件）",
    "time (s)": "时间（秒）", "probability": "概率",
    "Supports it at:": "支持的时刻：", "Contradicts it at:": "矛盾的时刻：",
    "{model} · {n} frame(s) checked · {total} total": "{model} · 检查了 {n} 帧 · 共 {total}",
    "Result (.json)": "结果（JSON）",
    # long-video runs as parent jobs (History, Analyze)
    "chapters (long video)": "章节（长视频）", "ground (long video)": "定位（长视频）",
    "search (long video)": "搜索（长视频）",
    "{stage}: {done} of {total} done": "{stage}：已完成 {done}/{total}",
    "Stopped part-way. Open it in Analyze and press **Run** to go on: finished chunks are "
    "kept.": "中途停止。在分析页打开并按 **运行** 继续：已完成的分段会保留。",
    "{n} job(s) in this run": "此运行共 {n} 个任务",
    "A run of this clip stopped at {done}/{total} ({state}). Press **Run** to go on: "
    "finished chunks are kept.": "此视频的一次运行停在 {done}/{total}（{state}）。按 **运行** "
                                 "继续：已完成的分段会保留。",
    "Select a row to see its frame in the player.": "选择一行即可在播放器中查看该帧。",
    "Show this moment in the player": "在播放器中显示这一时刻",
    "({n} of {total})": "（共 {total} 个，显示 {n} 个）",
    "Supports it": "支持",
    "Type what to look for to run.": "先输入要查找的内容，才能运行。",
    "Type the statement to check to run.": "先输入要检查的陈述，才能运行。",
    "Same clip, same settings: this is the earlier run's result, not a new analysis. Change "
    "a setting to analyse it again.": "相同的视频、相同的设置：这是之前那次运行的结果，不是新的分析。"
                                      "修改任一设置即可重新分析。",
    "All moments ({n})": "全部时刻（{n}）",
    "Click the curve or select a row to see that moment in the player.":
        "点击曲线或选择一行，即可在播放器中查看该时刻。",
}
