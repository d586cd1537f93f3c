"""Prompts on everyday subjects and formats the stdlib-derived set lacks."""

from __future__ import annotations

import random
import textwrap
from typing import List


from .stdlib import LANGUAGES, _functions


# --- general prompts: everyday subjects and formats the stdlib-derived set lacks ---------------------
# Written for this project (word lists and templates); passages come from Python's own documentation
# (pydoc_data.topics). Kept apart from the benchmark suite (llamaspec/prompts.json) on purpose: no
# template reuses a suite prompt's wording or scaffold (its "Explanation:", "Question:/Answer:",
# "Summary in two sentences:", "Step 1:", "Poem:", "Output only the JSON" + fenced array, "Reasoning:" or
# "Review:" endings), nor its subjects (hash tables, planets, museums, lighthouses, shop change, pets,
# multiplication tables, stacks, interval merging, string splitting, code review of a user loader).

SUBJECTS = [
    "photosynthesis", "the water cycle", "volcanoes", "earthquakes", "the moon's phases", "tides", "rainbows",
    "the immune system", "vaccines", "the human heart", "digestion", "sleep", "muscles", "DNA", "evolution",
    "bees and pollination", "coral reefs", "rain forests", "deserts", "glaciers", "climate change",
    "renewable energy", "solar panels", "wind turbines", "batteries", "electric cars", "magnets", "electricity",
    "sound waves", "light and colour", "gravity", "friction", "the speed of light", "black holes",
    "comets", "the Roman Empire", "ancient Egypt", "the printing press", "the industrial revolution",
    "the first airplanes", "the invention of the telephone", "the Silk Road", "the Great Wall of China",
    "the Olympic Games", "democracy", "taxes", "inflation", "interest rates", "supply and demand", "money",
    "banks", "insurance", "recycling", "composting", "bread baking", "coffee", "tea", "chocolate",
    "cheese making", "vegetable gardens", "house plants", "dogs", "owls", "whales", "penguins", "ants",
    "bicycles", "trains", "bridges", "skyscrapers", "maps", "compasses", "clocks", "calendars", "libraries",
    "newspapers", "the internet", "email", "passwords", "encryption", "databases", "compilers",
    "operating systems", "computer memory", "recursion", "sorting algorithms", "binary numbers",
    "version control", "unit tests", "web browsers", "spreadsheets", "smartphones", "cameras",
    "music notation", "the piano", "the guitar", "watercolour painting", "chess", "football", "marathons",
    "swimming", "yoga", "first aid", "healthy breakfasts", "budgeting", "job interviews", "public speaking",
    "time management", "learning a language", "planning a trip", "camping", "hiking safety",
    "weather forecasts", "clouds", "snow", "thunderstorms", "rivers", "mountains", "islands", "forests",
    "farming", "fishing", "wool", "cotton", "glass", "paper", "steel", "plastic", "concrete", "wood", "salt",
    "sugar", "vitamins",
]
AUDIENCES = ["a ten-year-old", "a busy manager", "a new colleague", "a curious teenager", "a retired engineer",
             "a tourist", "someone who has never heard of it"]
CREATIVE_FORMS = ["haiku", "short story", "limerick", "diary entry", "dialogue between two friends",
                  "product description", "short speech", "fable", "song chorus", "postcard message"]
CHARACTERS = ["a baker", "an old sailor", "a young inventor", "a lost robot", "a village doctor", "a clever fox",
              "a lonely astronaut", "a retired teacher", "a street musician", "a tired detective", "a gardener",
              "a shy dragon", "a mail carrier", "a night-shift nurse", "a chess champion", "a fisherman's daughter"]
NAMES = ["Alice", "Omar", "Lena", "Kenji", "Sofia", "David", "Priya", "Tom", "Chen", "Fatima", "Lucas", "Nina",
         "Ravi", "Elena", "Jonas", "Amara"]
ENTITIES = {"books": ["title", "author", "year", "pages", "genres"], "cities": ["name", "country", "population", "landmarks"],
            "products": ["sku", "name", "price", "in_stock", "tags"], "students": ["student_id", "name", "grade", "courses", "graduated"],
            "cars": ["make", "model", "year", "electric", "features"], "recipes": ["name", "servings", "minutes", "ingredients"],
            "movies": ["title", "director", "year", "rating", "cast"], "servers": ["hostname", "ip", "cores", "online", "services"],
            "orders": ["order_id", "customer", "total", "paid", "items"], "songs": ["title", "artist", "seconds", "album"]}
LANGUAGES_CODE = [("Python", "python"), ("C", "c"), ("JavaScript", "javascript"), ("Java", "java"),
                  ("Rust", "rust"), ("Go", "go"), ("TypeScript", "typescript"), ("Bash", "bash"), ("C++", "cpp")]
CODE_TASKS = ["reverses a string", "counts the words in a text", "returns the n-th Fibonacci number",
              "checks whether a number is prime", "computes the greatest common divisor of two integers",
              "finds the largest element of an array", "removes duplicates from a list while keeping order",
              "performs binary search on a sorted array", "sorts an array with insertion sort",
              "converts a temperature from Celsius to Fahrenheit", "merges two sorted arrays into one sorted array",
              "counts how often each character occurs in a string", "computes the average of a list of numbers",
              "flattens a nested list", "transposes a matrix", "validates an email address with simple rules",
              "returns the factorial of n", "rotates an array by k positions", "finds the second smallest number",
              "capitalises the first letter of every word", "computes the sum of the digits of a number",
              "converts an integer to its binary representation", "reads a text file and prints the longest line",
              "computes the dot product of two vectors", "checks whether two strings are anagrams",
              "splits a list into chunks of size n", "returns the running total of a list of numbers",
              "counts the vowels in a string", "computes the median of a list", "generates all subsets of a set"]
PATTERNS = ["Count from {a} to {b} in steps of {c}, separated by commas.\n\n{a}, ",
            "The squares of 1 to {n}:\n1 -> 1\n2 -> 4\n",
            "Kilometres to miles, 1 to {n} km:\n1 km = 0.62 miles\n",
            "Powers of two up to 2^{n}:\n2^0 = 1\n2^1 = 2\n",
            "Days of the week in {lang}:\n1. ", "Months of the year and their days:\nJanuary - 31\n",
            "A countdown from {n} to 0:\n{n}\n", "The first {n} even numbers: 2, 4, 6,",
            "Repeat the phrase \"{s} matters\" {n} times, numbered:\n1. {s} matters\n",
            "Alphabet with one animal per letter:\nA - ant\nB - bear\n"]


def _passages(rng: random.Random) -> list:
    """Paragraphs of English prose from Python's own documentation (pydoc_data.topics)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped interpreters
        return ["Python is a programming language that lets you work quickly and integrate systems effectively."]
    out = []
    for text in topics.values():
        for para in text.split("\n\n"):
            para = " ".join(para.split())
            if 200 <= len(para) <= 700 and para[0].isalpha() and not para.startswith(("Changed", "New in", "Added")):
                out.append(para)
    rng.shuffle(out)
    return out


def build_general_prompts(n: int = 2000, seed: int = 0) -> List[dict]:
    """``n`` distinct prompts on everyday subjects and formats (explanations, questions, summaries,
    translation, creative writing, word problems, logic, JSON records, code in several languages, code
    reading, counting patterns), drawn evenly from the categories and shuffled with ``seed``."""
    rng = random.Random(seed + 7919)
    passages = _passages(rng)
    functions = _functions(rng)
    pick = rng.choice

    def explain(i):
        s = pick(SUBJECTS)
        return pick([f"How would you describe {s} to {pick(AUDIENCES)}?\n\n", f"Describe how {s} works.\n\n",
                     f"## {s[0].upper() + s[1:]}\n\n", f"Write a short encyclopedia entry about {s}.\n\n"])

    def question(i):
        s = pick(SUBJECTS)
        q = pick([f"What is {s}?", f"Why does {s} matter?", f"How does {s} work?", f"Tell me three facts about {s}.",
                  f"Who benefits from {s}, and how?", f"What is the history of {s}?", f"What can go wrong with {s}?"])
        return pick([f"Q: {q}\nA:", f"{q}\n\n", f"User: {q}\nAssistant:", f"FAQ\n\n{q}\n"])

    def summarize(i):
        text = passages[i % len(passages)]
        return pick([f"{text}\n\nTL;DR:", f"Paragraph: {text}\n\nIn short,", f"{text}\n\nThe key idea here is",
                     f"Condense this into a single sentence:\n{text}\n\n"])

    def translate(i):
        text = passages[i % len(passages)]
        sentence = text[:text.find(". ") + 1] if ". " in text else text
        return pick([f"Translate into {pick(LANGUAGES)}: {sentence}\n\n", f"{sentence}\n\nIn {pick(LANGUAGES)}:",
                     f"EN: {sentence}\n{pick(['FR', 'DE', 'ES', 'IT'])}:"])

    def creative(i):
        form = pick(CREATIVE_FORMS)
        who = pick(CHARACTERS)
        about = pick([f"{who} who finds something unexpected", f"{who} on a rainy day", f"{pick(SUBJECTS)}",
                      f"{who} and {pick(SUBJECTS)}"])
        return pick([f"Write a {form} about {about}.\n\n", f"A {form} about {about}:\n\n"])

    def word_problem(i):
        name = pick(NAMES)
        problem = pick([
            f"A train travels {rng.randint(40, 160)} km per hour for {rng.randint(2, 7)} hours and then "
            f"{rng.randint(30, 120)} km per hour for {rng.randint(1, 5)} hours. How far does it travel in total?",
            f"A rectangle is {rng.randint(3, 40)} cm long and {rng.randint(2, 30)} cm wide. What are its area and perimeter?",
            f"{name} reads {rng.randint(10, 60)} pages a day. The book has {rng.randint(200, 900)} pages. "
            "How many days does it take to finish it?",
            f"A class of {rng.randint(18, 35)} students is split into groups of {rng.randint(3, 6)}. "
            "How many full groups are there and how many students are left over?",
            f"A tank holds {rng.randint(100, 900)} litres and a pipe fills {rng.randint(5, 40)} litres per minute. "
            "How long does it take to fill the empty tank?"])
        return pick([f"{problem}\n\nSolution:", f"{problem} Show your working.\n\n", f"Exercise: {problem}\nAnswer with an explanation:"])

    def logic(i):
        people = rng.sample(NAMES, 3)
        things = rng.sample(["a bicycle", "a violin", "a telescope", "a kayak", "a camera", "a chessboard"], 3)
        return (f"{people[0]}, {people[1]} and {people[2]} each have one of {things[0]}, {things[1]} and "
                f"{things[2]}. {people[0]} does not have {things[1]}. {people[1]} has neither {things[0]} nor "
                f"{things[2]}. Who has which item?\n\n")

    def json_records(i):
        entity, keys = pick(list(ENTITIES.items()))
        keys = keys[:1] + rng.sample(keys[1:], rng.randint(2, len(keys) - 1))  # varied schemas
        count = rng.randint(2, 5)
        return pick([f"Create a JSON object describing one of the {entity}, with keys " + ", ".join(keys) + ".\n\n{",
                     f"# {count} sample {entity}\n{entity} = [\n    {{\"{keys[0]}\": ",
                     f"Fictional {entity} as JSON lines ({', '.join(keys)}):\n{{\"{keys[0]}\": "])

    def code_other(i):
        lang, fence = pick(LANGUAGES_CODE)
        task = CODE_TASKS[i % len(CODE_TASKS)]
        comment = "#" if fence in ("python", "bash") else "//"
        return pick([f"Write a {lang} function that {task}.\n\n```{fence}\n", f"{comment} {lang}: a function that {task}\n",
                     f"Implement a {lang} program that {task}, with comments.\n\n```{fence}\n"])

    def code_reading(i):
        module, attr, obj, source = functions[i % len(functions)]
        body = "\n".join(textwrap.dedent(source).splitlines()[:25])
        return pick([f"```python\n{body}\n```\n\nWhat does this code do?\n\n",
                     f"```python\n{body}\n```\n\nA step-by-step walk through this function:\n\n",
                     f"Add comments to this function.\n\n```python\n{body}\n```\n\n```python\n"])

    def pattern(i):
        return pick(PATTERNS).format(a=rng.randint(2, 19), b=rng.randint(40, 200), c=rng.randint(2, 9),
                                     n=rng.randint(8, 20), lang=pick(LANGUAGES), s=pick(SUBJECTS).capitalize())

    makers = {"explain": explain, "question": question, "summarize": summarize, "translate": translate,
              "creative": creative, "word_problem": word_problem, "logic": logic, "json_records": json_records,
              "code_other": code_other, "code_reading": code_reading, "pattern": pattern}
    return _draw_distinct(makers, n, "general_", rng, step=1)


def _draw_distinct(makers: dict, n: int, prefix: str, rng: random.Random, step: int) -> List[dict]:
    """``n`` distinct prompts, the categories in turn, shuffled with ``rng``: a maker that repeats an
    earlier prompt (small templates do) is called again with its index moved on by ``step``."""
    names = list(makers)
    prompts, seen = [], set()
    for i in range(n):
        category = names[i % len(names)]
        for attempt in range(50):
            prompt = makers[category](i + attempt * step)
            if prompt not in seen:
                seen.add(prompt)
                prompts.append({"category": prefix + category, "prompt": prompt})
                break
    rng.shuffle(prompts)
    return prompts
