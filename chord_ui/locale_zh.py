"""Simplified Chinese for the interface: English text (as written in the code) → Chinese.

Placeholders in braces are filled in after translation and must match the English ones
(``tests/app/test_i18n.py`` checks that, and that every text the pages translate is here).
"""

from __future__ import annotations

ZH: dict[str, str] = {
    # navigation and page titles
    "Analyze": "分析", "Batch": "批量", "History": "历史", "GPUs": "GPU",
    "Analyze a clip": "分析视频",
    "Queue many clips with one task. They run on every worker at once; clips already "
    "analysed with the same settings are skipped.":
        "用同一个任务排队处理多个视频。它们会同时在所有工作进程上运行；"
        "已用相同设置分析过的视频会被跳过。",
    "Each clip gets its own sampling plan when a worker picks it up.":
        "每个视频在工作进程接手时得到自己的采样计划。",
    "Analyses from the Analyze and Batch pages, and from `chord batch` runs that use the "
    "same data folder.": "来自“分析”和“批量”页面，以及使用同一数据文件夹的 `chord batch` 运行的分析。",
    "Live readings every {s} s from one sampler shared by every session; charts show the "
    "last 5 minutes.": "每 {s} 秒读取一次，所有会话共用一个采样器；图表显示最近 5 分钟。",
    # sidebar: model
    "Model": "模型", "Hub model": "Hub 模型", "Local folder": "本地文件夹",
    "Test model": "测试模型", "Test model (random weights)": "测试模型（随机权重）",
    "A Hugging Face hub id, a folder with downloaded weights, or a tiny random-weight model "
    "for trying Chord offline.":
        "Hugging Face Hub 模型 ID、存放已下载权重的文件夹，或用于离线试用 Chord 的随机权重小模型。",
    "Hub id": "Hub 模型 ID", "Model folder": "模型文件夹",
    "Pick one or type another Qwen2.5-VL / Qwen3-VL repo id. Sizes: parameters and the GPU "
    "memory Chord plans for (bf16 weights × 1.2).":
        "选择一个，或输入其他 Qwen2.5-VL / Qwen3-VL 仓库 ID。大小：参数量及 Chord 计划占用的显存"
        "（bf16 权重 × 1.2）。",
    "Tiny random-weight checkpoints with each family's files, prompts and coordinate "
    "convention.": "随机权重的小检查点，文件、提示词和坐标约定与各模型系列一致。",
    "{family} family (test model)": "{family} 系列（测试模型）",
    "Enter the folder that holds the model weights (config.json, *.safetensors).":
        "请输入存放模型权重（config.json、*.safetensors）的文件夹。",
    "**{label}** ({family}) — a tiny checkpoint built locally on first use. Its output is "
    "meaningless; use it to try Chord without downloading.":
        "**{label}**（{family}）——首次使用时在本机生成的小检查点。它的输出没有意义；"
        "用它无需下载即可试用 Chord。",
    "test model — random weights": "测试模型——随机权重",
    "Available locally": "已在本机", "Use the test model instead": "改用测试模型",
    "Loads on the first run and stays in memory for every session.":
        "首次运行时加载，之后对所有会话常驻内存。",
    "Loaded and ready.": "已加载，可以使用。", "Loading…": "加载中…",
    # sidebar: settings
    "Max generation length": "最大生成长度",
    "Upper bound on tokens the model writes for a description (grounding answers have their "
    "own fixed per-frame limit).": "模型写描述时最多生成的 个词元（定位的回答每帧有固定的长度上限）。",
    "Advanced sampling": "高级采样", "Automatic frame rate": "自动帧率",
    "Auto: the task's default (2 fps for grounding, adaptive for descriptions), lowered to "
    "fit the limits below.": "自动：使用任务的默认值（定位 2 fps，描述自适应），并按下面的限制降低。",
    "Sampling fps": "采样帧率（fps）", "Max frames": "最多帧数",
    "Max resolution (visual tokens per frame)": "最高分辨率（每帧视觉词元）",
    "One visual token covers 28×28 px. 768 ≈ 0.6 MP; auto uses the task's default (768 to "
    "describe, 1280 to ground).":
        "一个视觉词元 覆盖 28×28 像素。768 ≈ 0.6 百万像素；自动使用任务默认值（描述 768，定位 1280）。",
    "auto": "自动",
    "Visual-token budget per request": "每次请求的视觉词元 预算",
    "Qwen advises keeping a clip under ~24k visual tokens.": "Qwen 建议每个视频不超过约 2.4 万个视觉词元。",
    "Plan: {numbers}": "计划：{numbers}",
    # clip input
    "Upload a video": "上传视频", "mp4, avi, mov, mkv or webm": "mp4、avi、mov、mkv 或 webm",
    "…or the path of a video on this machine": "…或本机上视频文件的路径",
    "Big local files need no upload; the path must exist on the machine running Chord.":
        "大的本地文件无需上传；路径必须在运行 Chord 的机器上存在。",
    "Try an example clip": "试用示例视频",
    "A short synthetic clip made on this machine (nothing is downloaded): a red ball and a "
    "blue square moving.": "在本机生成的一段合成短视频（不下载任何内容）：一个红球和一个蓝色方块在移动。",
    "Current clip:": "当前视频：", "Remove": "移除",
    "uploaded": "已上传", "local file": "本地文件",
    "Duration": "时长", "Frame rate": "帧率", "Size": "尺寸", "Codec": "编码", "Rotation": "旋转",
    "Making a browser-playable preview…": "正在生成可在浏览器中播放的预览…",
    "A frame of the clip (no playable preview of this file)": "片段中的一帧（此文件没有可播放的预览）",
    "Browsers cannot play {ext} files: this is an H.264 preview made for the page. Analysis "
    "reads the original.": "浏览器无法播放 {ext} 文件：这是为页面生成的 H.264 预览。分析读取的是原文件。",
    "How to fix:": "解决办法：",
    "The link names a job this Chord does not know ({job}): it may have been deleted. Start "
    "a new analysis below.": "链接中的任务在此 Chord 上不存在（{job}）：可能已被删除。请在下面开始新的分析。",
    # task
    "Mode": "模式", "Describe": "描述", "Ground a target": "定位目标",
    "Check a statement": "检查陈述", "Target": "目标",
    "e.g. the cyclist in a red helmet": "例如：戴红色头盔的骑车人",
    "Chord looks for it on every sampled frame, then links the boxes into tracks and time "
    "segments.": "Chord 在每个采样帧上查找它，再把框连接成轨迹和时间段。",
    "Score each box": "为每个框打分",
    "The probability that the box shows the target, checked by the model on the box's crop; "
    "lets you filter weak boxes. Slower.":
        "框内是目标的概率，由模型在框的裁剪图上检查；可用来过滤弱框。速度较慢。",
    "Statement": "陈述",
    "Chord checks it on every sampled frame: a probability curve over time, an overall "
    "verdict, and the moments that support or contradict it.":
        "Chord 在每个采样帧上检查它：给出随时间变化的概率曲线、总体结论，以及支持或否定它的时刻。",
    "Prompt (optional)": "提示词（可选）",
    "Leave empty for a detailed description, or ask something specific about the clip.":
        "留空则生成详细描述，也可以就视频提出具体问题。",
    # plan and run
    "Plan:": "计划：", "Show the numbers": "显示具体数字",
    "Chord will look at {n} pictures from across the clip ({how}), {detail}.":
        "Chord 将查看视频中的 {n} 张画面（{how}），{detail}。",
    "Chord will look at one picture, {detail}.": "Chord 将查看一张画面，{detail}。",
    "about {n} a second": "约每秒 {n} 张", "about one every {s} seconds": "约每 {s} 秒一张",
    "in high detail": "高清晰度", "in medium detail": "中等清晰度", "in low detail": "低清晰度",
    "{n} frames × {w}×{h} · {tokens} visual tokens · {fps} fps":
        "{n} 帧 × {w}×{h} · {tokens} 个视觉词元 · {fps} fps",
    "Upload a clip or give a path to see the sampling plan.": "上传视频或给出路径，即可看到采样计划。",
    "Choose a model that is available (sidebar) to run.": "请在侧边栏选择一个可用的模型再运行。",
    "This clip was already analysed with these settings.": "这个视频已用相同设置分析过。",
    "This clip is being analysed with these settings right now.": "这个视频正在用相同设置分析。",
    "Show that result": "查看该结果", "Follow that job": "跟踪该任务",
    "Run": "运行", "Cancel": "取消",
    # progress
    "Waiting for the worker": "等待工作进程", "Probing": "探测文件", "Sampling": "采样",
    "Loading model": "加载模型", "Reading frames": "读取帧", "Preparing frames": "准备帧",
    "Generating": "生成中", "Looking for the target": "查找目标", "Tracking": "跟踪",
    "Rendering": "渲染", "Done": "完成", "Working": "处理中",
    "Placing the model": "放置模型", "Scoring the boxes": "为框打分",
    "Checking the statement": "核对陈述", "Describing the chunks": "描述各片段",
    "Writing the chapters": "撰写章节", "Summarising": "汇总", "Grounding the chunks": "在各片段中定位",
    "{stage}: frame {done}/{total}": "{stage}：第 {done}/{total} 帧",
    "Loading model {model}": "正在加载模型 {model}",
    "Next in line: waiting for a free worker": "下一个就轮到它：等待空闲的工作进程",
    "In the queue: {n} job(s) ahead of this one": "排队中：前面还有 {n} 个任务",
    "Elapsed {elapsed}": "已用 {elapsed}", "about {left} left": "约剩 {left}",
    "estimating the time left…": "正在估算剩余时间…",
    "Collecting CPU/RAM readings…": "正在读取 CPU/内存…",
    "CPU · {pct} % (no NVIDIA GPU)": "CPU · {pct} %（无 NVIDIA GPU）",
    "RAM {used} / {total} GiB": "内存 {used} / {total} GiB",
    "memory {used} / {total} GiB": "显存 {used} / {total} GiB",
    # results
    "Cancelled after {elapsed}. Press **Run** to start again.": "已在 {elapsed} 后取消。按 **运行** 重新开始。",
    "**Partial result** — only the frames finished before Cancel are in it.":
        "**部分结果**——只包含取消前已完成的帧。",
    "The video file at {path} is gone or outside the media roots, so its frames cannot be "
    "shown. Everything below comes from the stored result.":
        "位于 {path} 的视频文件已不存在或不在媒体根目录内，无法显示画面。以下内容均来自保存的结果。",
    "{model} · {plan} · {total} total{method}": "{model} · {plan} · 共 {total}{method}",
    " · two-pass: {n} of {total} frames grounded (spans {spans})":
        " · 两遍法：{total} 帧中定位了 {n} 帧（时间段 {spans}）",
    "none": "无",
    "**{label}** — this output is meaningless; it only shows that the pipeline works.":
        "**{label}**——此输出没有意义，只用来说明流程可以运行。",
    "Description": "描述", "(the model returned no text)": "（模型没有返回文字）",
    "Plain text (copy)": "纯文本（复制）", "Text (.txt)": "文本（.txt）",
    "the target": "目标",
    "“{target}” not found in {n} sampled frames": "在 {n} 个采样帧中未找到“{target}”",
    "“{target}” appears in 1 segment: {spans}": "“{target}”出现在 1 个时间段：{spans}",
    "“{target}” appears in {n} segments: {spans}": "“{target}”出现在 {n} 个时间段：{spans}",
    " ({n} tracks)": "（{n} 条轨迹）",
    "Minimum box score": "最低框分数",
    "Each box's score is the probability that its region shows the target, checked by the "
    "model on the box's crop.": "每个框的分数是其区域显示目标的概率，由模型在框的裁剪图上检查。",
    "Showing {n} of {total} boxes (score ≥ {least}).": "显示 {total} 个框中的 {n} 个（分数 ≥ {least}）。",
    "**Detections** ({n})": "**检测结果**（{n}）", "No boxes on any sampled frame.": "所有采样帧上都没有框。",
    "**Key frames**": "**关键帧**", "No key frames: the target was not found.": "没有关键帧：未找到目标。",
    "Frame {idx} could not be read: {why}": "无法读取第 {idx} 帧：{why}",
    "Notes ({n})": "说明（{n}）", " (and {n} more like it)": "（另有 {n} 条类似）",
    "Raw model output (per sampled frame)": "模型原始输出（每个采样帧）",
    "Model reasoning (Thinking model)": "模型推理过程（思考模型）",
    "Result JSON": "结果 JSON", "Detections CSV": "检测结果 CSV",
    "Annotated MP4": "标注 MP4", "Make annotated MP4": "生成标注 MP4",
    "Draws the boxes on every frame of the clip (H.264).": "在视频的每一帧上画出框（H.264）。",
    "Rendering frame {done}/{total}": "正在渲染第 {done}/{total} 帧",
    # player
    "Result player": "结果播放器", "Play": "播放", "Pause": "暂停",
    "Previous frame (←)": "上一帧（←）", "Next frame (→)": "下一帧（→）", "frame": "帧",
    "box(es)": "个框", "sampled frames": "采样帧", "Jump to": "跳到", "unlinked": "未关联",
    "Seek bar: drag to any moment": "进度条：拖动到任意时刻",
    "Click the player, then ←/→ step one frame, Space plays or pauses":
        "点击播放器后，←/→ 逐帧移动，空格键播放或暂停",
    # long video (issue 15)
    "Chapters": "章节", "Found": "找到",
    "Run describes it chunk by chunk and merges the chunks into chapters.":
        "运行时逐段描述，再把各段合并成章节。",
    "Run grounds the whole clip in chunks at {fps} frame(s) per second.":
        "运行时以每秒 {fps} 帧分段定位整段视频。",
    "**Long video** — {duration} is longer than {threshold}, so it is analysed in parts.":
        "**长视频** — {duration} 长于 {threshold}，因此分段分析。",
    "Chord will describe about {chunks} chunks of about {chunk} each, {pictures} pictures per "
    "chunk, and merge them into about {chapters} chapter(s).":
        "Chord 将描述约 {chunks} 段（每段约 {chunk}，每段 {pictures} 张画面），"
        "再合并为约 {chapters} 个章节。",
    "Chord will look for the target in {frames} pictures, one every {every}, in {jobs} jobs "
    "of up to {per} pictures.": "Chord 将在 {frames} 张画面中查找目标（每 {every} 一张），"
                                "分 {jobs} 个任务，每个最多 {per} 张。",
    "{n} min": "{n} 分钟", "{n} s": "{n} 秒",
    "Describing chunks": "正在描述各段", "Writing chapter titles": "正在写章节标题",
    "Writing the summary": "正在写总结", "Grounding chunks": "正在定位各段",
    "Checking frames": "正在检查帧", "Starting": "正在开始",
    "Cancelled. Press **Run** to go on: finished chunks are kept.":
        "已取消。按 **运行** 继续：已完成的段会保留。",
    "**Search this video**": "**在视频中搜索**", "When does this happen?": "这件事何时发生？",
    "e.g. a person opens the car door": "例如：有人打开车门", "Search": "搜索",
    "Not found in the chapters checked ({n} frames).": "在检查过的章节中没有找到（{n} 帧）。",
    "{span} · chapter {chapter} · score {score}": "{span} · 第 {chapter} 章 · 得分 {score}",
    "at {at}": "在 {at}", "{start} to {end}": "{start} 至 {end}",
    "Play from {at}": "从 {at} 播放",
    "Chapters JSON": "章节 JSON",
}
